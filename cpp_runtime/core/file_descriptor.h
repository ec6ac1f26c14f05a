// A file descriptor closed when it goes out of scope, for the core's files that work
// through POSIX calls (O_NOFOLLOW, O_EXCL, memfd) where a stream cannot.
#pragma once

#include <unistd.h>

namespace aoti_runner {

struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace aoti_runner
