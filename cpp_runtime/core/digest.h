// SHA-256 with OpenSSL's EVP interface, for the signed-bundle checks (bundle.cpp hashes
// each file as it copies it; signature.cpp hashes the key and the manifest).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace aoti_runner {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  // The digest as raw bytes (32 of them); the hasher cannot be updated afterwards.
  std::string finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A Sha256 fed on a thread of its own, so that hashing overlaps the caller's other work
// on the same bytes (the verified load writes them out while they are hashed). update()
// hands over a block and returns once the block before it is hashed: the caller may
// then reuse that earlier block's buffer, and must keep this one unchanged until its
// next update() or finish() returns.
class Sha256Thread {
 public:
  Sha256Thread();
  ~Sha256Thread();  // waits for the block in hand, then stops the thread
  Sha256Thread(const Sha256Thread&) = delete;
  Sha256Thread& operator=(const Sha256Thread&) = delete;

  void update(const void* data, size_t size);
  std::string finish();  // as Sha256::finish, once every block is hashed

 private:
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

// One-shot helpers.
std::string sha256(const std::string& data);
// The raw digest of a file's bytes, read in 1 MiB blocks. Throws RunnerError naming
// `what` when it cannot be read.
std::string sha256_file(const std::string& path, const std::string& what);
std::string to_hex(const std::string& bytes);

}  // namespace aoti_runner
