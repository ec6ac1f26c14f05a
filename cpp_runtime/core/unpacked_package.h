// A .pt2 package's model files, unpacked into a private folder (PrivateFolder: mkdtemp,
// 0700, named by this process so a later runner removes it if this one is killed) in the
// layout AOTIModelPackageLoader's folder mode reads, so the loader can be built from the
// folder and the folder removed as soon as the loader holds what it needs. Pairs with
// aoti_package.cpp (the loader) and zip_archive.cpp (the checked index it reads by).
#pragma once

#include "private_folder.h"

#include <optional>
#include <string>

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
  std::optional<PrivateFolder> folder_;
};

}  // namespace aoti_runner
