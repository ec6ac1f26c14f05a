// Helpers shared by the fuzz targets: the input as a file (the readers take paths, as
// the runners do), and the one rule every target applies to what a parser throws.
#pragma once

#include "errors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <typeinfo>

namespace aoti_fuzz {

// The bytes as an anonymous in-memory file, opened by path like any other: no file is
// left behind when the fuzzer stops or crashes.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(memfd_create("aoti_fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    size_t written = 0;
    while (written < size) {
      const auto n = ::write(fd_, data + written, size - written);
      if (n <= 0) {
        std::perror("write");
        std::abort();
      }
      written += static_cast<size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() {
    ::close(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const {
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// Runs `body`. A RunnerError is a verdict (the input was refused with a message the
// user sees); any other exception escaping a parser is a finding: the runners would
// print a library's words, or worse, a caller that catches only RunnerError would stop.
template <class Body>
void expect_verdict(const char* what, Body&& body) {
  try {
    body();
  } catch (const aoti_runner::RunnerError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw %s, not a RunnerError: %s\n", what, typeid(e).name(), e.what());
    std::abort();
  }
}

}  // namespace aoti_fuzz
