// Shared objects from untrusted sources (a package's model library, an op library),
// checked before dlopen: the dynamic loader maps segments that a truncated file does
// not have and dies with SIGBUS on first touch. Pairs with
// python/aoti_deploy/package/shared_object.py.
#pragma once

#include "zip_archive.h"

#include <cstdint>
#include <string>

namespace aoti_runner {

// Refuses (RunnerError kind "damaged") anything but a complete 64-bit little-endian
// ELF shared object for this machine: its program headers, every segment's file
// bytes, and its section headers and sections inside the `size` bytes that `read`
// reads. `what` names it in the message, and `fix` ends it.
void check_shared_object(uint64_t size, const ReadAt& read, const std::string& what, const std::string& fix);

// check_shared_object on a file.
void check_shared_object_file(const std::string& path, const std::string& what, const std::string& fix);

}  // namespace aoti_runner
