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

// One-shot helpers.
std::string sha256(const std::string& data);
// The raw digest of a file's bytes, read in 1 MiB blocks. Throws RunnerError naming
// `what` when it cannot be read.
std::string sha256_file(const std::string& path, const std::string& what);
std::string to_hex(const std::string& bytes);

}  // namespace aoti_runner
