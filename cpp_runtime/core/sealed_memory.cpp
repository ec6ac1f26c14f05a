#include "sealed_memory.h"

#include "digest.h"
#include "errors.h"
#include "file_descriptor.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace aoti_runner {
namespace {

[[noreturn]] void io_failed(const std::string& what, const std::string& path) {
  throw RunnerError("could not " + what + " " + path + ": " + std::strerror(errno));
}

// Reads the regular file `source` once, in 1 MiB blocks, into the hasher and, when
// `copy_to` is an open descriptor, into it. Returns the hex digest.
std::string read_regular_file(const std::string& source, int copy_to, const std::string& copy_name,
                              uint64_t& bytes) {
  const auto in = open_regular_file(source);
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  ssize_t got = 0;
  while ((got = read(in->fd, buffer.data(), buffer.size())) > 0) {
    hasher.update(buffer.data(), static_cast<size_t>(got));
    for (ssize_t done = 0; copy_to >= 0 && done < got;) {
      const auto wrote = write(copy_to, buffer.data() + done, static_cast<size_t>(got - done));
      if (wrote < 0) io_failed("write", copy_name);
      done += wrote;
    }
    bytes += static_cast<uint64_t>(got);
  }
  if (got < 0) io_failed("read", source);
  return to_hex(hasher.finish());
}

}  // namespace

std::unique_ptr<FileDescriptor> open_regular_file(const std::string& source) {
  // O_NOFOLLOW + O_NONBLOCK + fstat: what is read is a regular file, even if the name
  // was swapped for a link or a FIFO after the layout was checked.
  auto in = std::make_unique<FileDescriptor>();
  in->fd = open(source.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat info {};
  if (in->fd < 0 || fstat(in->fd, &info) != 0) io_failed("open", source);
  if (!S_ISREG(info.st_mode)) {
    throw RunnerError(source + ": not a regular file (a symlink, directory or other); a bundle holds "
                               "only regular files",
                      "bundle_layout");
  }
  return in;
}

SealedFile SealedFile::copy_of(const std::string& source, const std::string& name) {
  SealedFile file;
  file.name_ = name;
  // MFD_CLOEXEC: no child process inherits it. The memfd lives in memory (shmem), has no
  // path any other process can open, and goes when its last descriptor and mapping do,
  // whatever kills the process.
  file.fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (file.fd_ < 0) io_failed("create a memfd for", source);
  const std::string shown = "the sealed copy of " + source;
  file.sha256_hex_ = read_regular_file(source, file.fd_, shown, file.size_);
  // F_SEAL_WRITE fails while a writable shared mapping exists; none was ever made.
  if (fcntl(file.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    io_failed("seal", shown);
  }
  return file;
}

SealedFile::SealedFile(SealedFile&& other) noexcept
    : fd_(other.fd_), name_(std::move(other.name_)), sha256_hex_(std::move(other.sha256_hex_)), size_(other.size_) {
  other.fd_ = -1;
}

SealedFile& SealedFile::operator=(SealedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    name_ = std::move(other.name_);
    sha256_hex_ = std::move(other.sha256_hex_);
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

SealedFile::~SealedFile() {
  if (fd_ >= 0) close(fd_);
}

std::string SealedFile::path() const {
  return "/proc/self/fd/" + std::to_string(fd_);
}

std::string sha256_regular_file(const std::string& source, uint64_t& bytes) {
  return read_regular_file(source, -1, "", bytes);
}

}  // namespace aoti_runner
