// A .pt2 package's model files, unpacked into a private folder (PrivateFolder: mkdtemp,
// 0700, named by this process so a later runner removes it if this one is killed) in the
// layout AOTIModelPackageLoader's folder mode reads, so the loader can be built from the
// folder and the folder removed as soon as the loader holds what it needs. Pairs with
// aoti_package.cpp (the loader) and zip_archive.cpp (the checked index it reads by).
#pragma once

#include "package_file.h"
#include "private_folder.h"
#include "zip_archive.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

class UnpackedPackage {
 public:
  // Unpacks the files AOTI's own extraction would write, to the same places:
  // <prefix>data/aotinductor/<model_name>/* as they are named, and
  // <prefix>data/constants/* into that model folder by file name. `path` is the .pt2 (a
  // file, or /proc/self/fd/N of a sealed copy); `shown` names it in messages. Every
  // entry is read through the checked zip index (names with "..", absolute paths and the
  // like are refused there) and its CRC-32 is checked. Throws RunnerError (kind
  // "damaged") and leaves no folder behind.
  UnpackedPackage(const std::string& path, const std::string& shown, const std::string& model_name = "model");

  // A verified load's unpacking, in one read: the regular file `source` (opened without
  // following a link; anything else is refused, kind "bundle_layout") is read once,
  // front to back, and every byte goes to the SHA-256 (on a second thread) and, when it
  // belongs to an entry that is written, to that entry's file, from the same buffer.
  // The zip index is read first, and the bytes it was read from are compared with the
  // ones hashed. Besides the loader's files (as above, CRC-32 checked), the other JSON
  // files and shared libraries, which the spec check reads, are written under other/ by
  // their index, so that bytes() gives the spec reader only bytes that were hashed; the
  // rest is hashed only. At most 65535 entries, each at most kMaxFolderDepth - 2 deep.
  // Kind "damaged" (also for a file that changed while it was read).
  static std::unique_ptr<UnpackedPackage> hashed(const std::string& source, const std::string& shown,
                                                 const std::string& model_name = "model");
  // hashed()'s: the file's SHA-256 (hex) and size.
  const std::string& sha256_hex() const { return sha256_hex_; }
  uint64_t size() const { return size_; }
  // hashed()'s: the package as it was hashed (the index's bytes from memory, each
  // entry's from its unpacked file), while the folder exists. Named `shown`.
  PackageBytes bytes(const std::string& shown) const;

  ~UnpackedPackage();
  UnpackedPackage(const UnpackedPackage&) = delete;
  UnpackedPackage& operator=(const UnpackedPackage&) = delete;

  const std::string& dir() const {
    static const std::string removed;
    return folder_ ? folder_->path() : removed;
  }
  // Removes the folder now (the destructor does otherwise); no error is raised.
  void remove() noexcept;

 private:
  UnpackedPackage() = default;
  std::optional<PrivateFolder> folder_;
  std::string sha256_hex_;
  uint64_t size_ = 0;
  std::vector<std::pair<uint64_t, std::string>> index_bytes_;  // (offset, bytes) the index was read from
  std::vector<std::pair<ZipEntry, std::string>> placed_;       // each entry with data, by offset: its file
};

}  // namespace aoti_runner
