// Fuzz target: a .pt2 package file as the runners read it before torch's loader sees
// it: the zip structure and entry names, every JSON entry, every shared library's ELF
// headers, the metadata and its spec, and the spec checked against the generated
// wrapper source's own input checks (read_package_spec, the runners' first step).
// Then the verified runner's way in: the same file unpacked as it is hashed
// (UnpackedPackage::hashed), whose spec, read from what was unpacked, must get the
// same verdict as the file's.
#include "fuzz_input.h"
#include "package_file.h"
#include "unpacked_package.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>

namespace {

// The input as a regular file with a real path (hashed() opens without following
// links, so /proc/self/fd/N will not do): one file in $TMPDIR, rewritten for each
// input and removed at exit.
const std::string& regular_copy(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    const char* temp = std::getenv("TMPDIR");
    std::string name = std::string(temp != nullptr && *temp != '\0' ? temp : "/tmp") + "/aoti_fuzz_package_XXXXXX";
    const int fd = mkstemp(name.data());
    if (fd < 0) {
      std::perror("mkstemp");
      std::abort();
    }
    close(fd);
    static std::string removed_at_exit = name;
    std::atexit([] { unlink(removed_at_exit.c_str()); });
    return name;
  }();
  const int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  for (size_t written = 0; fd >= 0 && written < size;) {
    const auto n = write(fd, data + written, size - written);
    if (n <= 0) {
      std::perror("write");
      std::abort();
    }
    written += static_cast<size_t>(n);
  }
  if (fd < 0 || close(fd) != 0) {
    std::perror("open");
    std::abort();
  }
  return path;
}

// The kind of RunnerError `body` threw, or nullopt when it returned.
template <typename Body>
std::optional<std::string> verdict(const char* what, Body&& body) {
  std::optional<std::string> kind;
  aoti_fuzz::expect_verdict(what, [&] {
    try {
      body();
    } catch (const aoti_runner::RunnerError& e) {
      kind = e.kind();
      throw;
    }
  });
  return kind;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aoti_fuzz::MemoryFile file(data, size);
  const auto from_file = verdict("read_package_spec", [&] { aoti_runner::read_package_spec(file.path()); });
  std::unique_ptr<aoti_runner::UnpackedPackage> unpacked;
  const auto& copy = regular_copy(data, size);
  verdict("UnpackedPackage::hashed", [&] { unpacked = aoti_runner::UnpackedPackage::hashed(copy, "it"); });
  if (unpacked) {
    const auto from_unpacked =
        verdict("read_package_spec (unpacked)", [&] { aoti_runner::read_package_spec(unpacked->bytes("it")); });
    if (from_file != from_unpacked) {
      std::fprintf(stderr, "read_package_spec: the file's verdict (%s) differs from the unpacked one's (%s)\n",
                   from_file.value_or("accepted").c_str(), from_unpacked.value_or("accepted").c_str());
      std::abort();
    }
  }
  return 0;
}
