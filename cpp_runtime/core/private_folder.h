// Private folders in $TMPDIR named by their owner (pid and start time), so that a later
// runner can remove the folder a killed one left behind, and never a live one's. The
// name format and the "is the owner gone" rule; python/aoti_deploy/package/private_folder.py
// has the same, pinned by tests/contract/private_folder_vectors.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace aoti_runner {

// The prefixes of the folders a runner makes: the C++ runtimes' unpacked package, and
// the Python runtime's private copy of a bundle.
inline constexpr const char* kUnpackedFolderPrefix = "aoti_deploy_unpacked_";
inline constexpr const char* kBundleCopyFolderPrefix = "aoti_deploy_bundle_";
// How many folder levels the removal descends into (an unpacked package is a few levels
// deep): what is unpacked into a private folder stays within it.
inline constexpr int kMaxFolderDepth = 32;

// A folder's owner, as its name records it: <prefix><pid>_<start>_<random>.
struct FolderOwner {
  uint64_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: clock ticks after boot
};

// The owner a folder's name records, or nullopt when the name is not one of ours
// (another prefix, the unowned names of earlier versions, a malformed number): such a
// folder is never removed.
std::optional<FolderOwner> private_folder_owner(const std::string& name);

// Field 22 (starttime) of a /proc/<pid>/stat text, or nullopt when it cannot be read
// (the command name, field 2, may hold spaces and parentheses: fields count from the
// last ')').
std::optional<uint64_t> start_time_from_stat(const std::string& stat_text);

// The rule: the owner is gone when no process has its pid (`stat_text` nullopt), or
// the process that has it started at another time (the pid was reused). A process
// whose start time cannot be read is taken to be the owner.
bool owner_is_gone(const FolderOwner& owner, const std::optional<std::string>& stat_text);

// A new private folder (mkdtemp: mode 0700) in $TMPDIR (else /tmp), named by this
// process, locked (flock) by a descriptor held for its life, so that even a sweeper
// in another pid namespace leaves it alone. Throws RunnerError naming `purpose`.
class PrivateFolder {
 public:
  PrivateFolder(const char* prefix, const std::string& purpose);
  ~PrivateFolder();
  PrivateFolder(const PrivateFolder&) = delete;
  PrivateFolder& operator=(const PrivateFolder&) = delete;

  const std::string& path() const { return path_; }
  // Removes the folder and its files (without following links); no error is raised.
  void remove() noexcept;

 private:
  std::string path_;
  int lock_fd_ = -1;
};

// Removes the folders of both prefixes in $TMPDIR whose owner is gone: only real
// folders (not links) of this user with mode 0700, as they are made, and only when
// no process holds their lock. Best effort: errors are ignored. Returns how many it
// removed.
size_t remove_orphaned_private_folders() noexcept;

}  // namespace aoti_runner
