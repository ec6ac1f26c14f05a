// A file descriptor closed when it goes out of scope, for the core's files that work
// through POSIX calls (O_NOFOLLOW, O_EXCL, memfd) where a stream cannot.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace aoti_runner {

struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) close(fd);
  }
};

// Reads exactly n bytes at offset (pread, retried on short reads); false when the file
// ends or fails first.
inline bool pread_fully(int fd, uint64_t offset, void* out, size_t n) {
  auto* bytes = static_cast<char*>(out);
  for (size_t done = 0; done < n;) {
    const auto got = pread(fd, bytes + done, n - done, static_cast<off_t>(offset + done));
    if (got <= 0) {
      return false;
    }
    done += static_cast<size_t>(got);
  }
  return true;
}

}  // namespace aoti_runner
