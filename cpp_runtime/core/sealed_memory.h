// A file's bytes copied into sealed memory (a memfd that nobody can write, grow or
// shrink once sealed), hashed while they are copied: a verified bundle's files are read
// from disk once, and everything loaded afterwards reads the sealed bytes that were
// hashed. Pairs with bundle.cpp (the trust policy) and op_libraries.cpp (dlopen).
#pragma once

#include "file_descriptor.h"

#include <cstdint>
#include <memory>
#include <string>

namespace aoti_runner {

class SealedFile {
 public:
  // Copies the regular file `source` (opened without following a link; anything else is
  // refused, kind "bundle_layout") into a new memfd named `name`, computing its SHA-256
  // from the very bytes written, then seals it (no write, grow, shrink, or new seals).
  static SealedFile copy_of(const std::string& source, const std::string& name);

  SealedFile(SealedFile&& other) noexcept;
  SealedFile& operator=(SealedFile&& other) noexcept;
  SealedFile(const SealedFile&) = delete;
  SealedFile& operator=(const SealedFile&) = delete;
  ~SealedFile();

  int fd() const { return fd_; }
  // /proc/self/fd/N: a path through which open(), dlopen() and the zip readers read the
  // sealed bytes (while this object lives).
  std::string path() const;
  const std::string& name() const { return name_; }
  const std::string& sha256_hex() const { return sha256_hex_; }
  uint64_t size() const { return size_; }

 private:
  SealedFile() = default;
  int fd_ = -1;
  std::string name_;
  std::string sha256_hex_;
  uint64_t size_ = 0;
};

// The regular file `source`, opened for reading without following a link (a link, FIFO,
// folder or other is refused, kind "bundle_layout"), as every verified read opens it.
std::unique_ptr<FileDescriptor> open_regular_file(const std::string& source);

// The SHA-256 (hex) of the regular file `source`, opened as SealedFile::copy_of opens
// it; adds its length to `bytes`.
std::string sha256_regular_file(const std::string& source, uint64_t& bytes);

}  // namespace aoti_runner
