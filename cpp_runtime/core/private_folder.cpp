#include "private_folder.h"

#include "errors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace aoti_runner {
namespace {

constexpr size_t kMinRandom = 6;   // mkdtemp's XXXXXX
constexpr size_t kMaxRandom = 16;  // Python's tempfile uses 8

// A decimal number without sign or leading zero, that fits in 64 bits.
std::optional<uint64_t> parse_decimal(const std::string& text) {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) {
    return std::nullopt;
  }
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

bool random_part_ok(const std::string& text) {
  if (text.size() < kMinRandom || text.size() > kMaxRandom) return false;
  for (const char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// /proc/<pid>/stat: nullopt when no process has that pid; "" when it could not be read.
std::optional<std::string> read_stat(uint64_t pid) {
  const auto path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT || errno == ESRCH ? std::nullopt : std::optional<std::string>("");
  }
  std::string text;
  char buffer[1024];
  ssize_t got = 0;
  while ((got = read(fd, buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<size_t>(got));
  }
  const bool gone = got < 0 && errno == ESRCH;  // it exited between open and read
  close(fd);
  if (gone) return std::nullopt;
  return got < 0 ? std::string() : text;
}

// This process's start time, or nullopt when /proc cannot tell it: then folders get the
// unowned name of earlier versions, and nothing is swept.
std::optional<uint64_t> own_start_time() {
  const auto text = read_stat(static_cast<uint64_t>(getpid()));
  return text ? start_time_from_stat(*text) : std::nullopt;
}

std::string temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? std::string(tmp) : std::string("/tmp");
}

// Removes what folder `fd` holds, without following links. Errors are ignored.
void remove_contents(int fd, int depth) {
  if (depth > kMaxFolderDepth) return;
  const int listed = dup(fd);
  DIR* dir = listed < 0 ? nullptr : fdopendir(listed);
  if (dir == nullptr) {
    if (listed >= 0) close(listed);
    return;
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  for (const auto& name : names) {
    struct stat info {};
    if (fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(info.st_mode)) {
      const int child = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) continue;
      remove_contents(child, depth + 1);
      close(child);
      unlinkat(fd, name.c_str(), AT_REMOVEDIR);
    } else {
      unlinkat(fd, name.c_str(), 0);
    }
  }
}

// Removes folder `name` of `parent` if it is one we made and its owner is gone.
bool remove_if_orphaned(int parent, const std::string& name) {
  const auto owner = private_folder_owner(name);
  if (!owner || !owner_is_gone(*owner, read_stat(owner->pid))) {
    return false;
  }
  struct stat before {};
  if (fstatat(parent, name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(before.st_mode) ||
      before.st_uid != geteuid() || (before.st_mode & 07777) != 0700) {
    return false;
  }
  const int fd = openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat opened {};
  // The lock: a live owner (whatever its pid namespace) holds it; so does another sweeper.
  const bool ours = fstat(fd, &opened) == 0 && opened.st_dev == before.st_dev && opened.st_ino == before.st_ino &&
                    flock(fd, LOCK_EX | LOCK_NB) == 0;
  if (ours) {
    remove_contents(fd, 0);
  }
  const bool removed = ours && unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0;
  close(fd);
  return removed;
}

}  // namespace

std::optional<FolderOwner> private_folder_owner(const std::string& name) {
  std::string rest;
  for (const std::string prefix : {kUnpackedFolderPrefix, kBundleCopyFolderPrefix}) {
    if (name.compare(0, prefix.size(), prefix) == 0) {
      rest = name.substr(prefix.size());
      break;
    }
  }
  const auto first = rest.find('_');
  const auto second = first == std::string::npos ? std::string::npos : rest.find('_', first + 1);
  if (second == std::string::npos) {
    return std::nullopt;
  }
  const auto pid = parse_decimal(rest.substr(0, first));
  const auto start = parse_decimal(rest.substr(first + 1, second - first - 1));
  if (!pid || *pid == 0 || !start || !random_part_ok(rest.substr(second + 1))) {
    return std::nullopt;
  }
  return FolderOwner{*pid, *start};
}

std::optional<uint64_t> start_time_from_stat(const std::string& stat_text) {
  const auto close_paren = stat_text.rfind(')');
  if (close_paren == std::string::npos) {
    return std::nullopt;
  }
  // Field 3 (state) is the first after the command name; starttime is field 22.
  size_t at = close_paren + 1;
  for (int field = 3; field <= 22; ++field) {
    if (at >= stat_text.size() || stat_text[at] != ' ') return std::nullopt;
    const auto end = std::min(stat_text.find_first_of(" \n", at + 1), stat_text.size());
    if (field == 22) {
      return parse_decimal(stat_text.substr(at + 1, end - at - 1));
    }
    at = end;
  }
  return std::nullopt;
}

bool owner_is_gone(const FolderOwner& owner, const std::optional<std::string>& stat_text) {
  if (!stat_text) {
    return true;
  }
  const auto start = start_time_from_stat(*stat_text);
  return start && *start != owner.start_time;
}

PrivateFolder::PrivateFolder(const char* prefix, const std::string& purpose) {
  std::string pattern = temp_dir() + "/" + prefix;
  if (const auto start = own_start_time()) {
    pattern += std::to_string(getpid()) + "_" + std::to_string(*start) + "_";
  }
  pattern += "XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {  // mode 0700: only this user may enter it
    throw RunnerError("could not create a folder " + pattern + " to " + purpose + ": " + std::strerror(errno));
  }
  path_ = pattern;
  lock_fd_ = open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (lock_fd_ >= 0) {
    flock(lock_fd_, LOCK_EX | LOCK_NB);  // new: nobody else holds it
  }
}

PrivateFolder::~PrivateFolder() {
  remove();
}

void PrivateFolder::remove() noexcept {
  if (path_.empty()) {
    return;
  }
  const auto slash = path_.rfind('/');
  const auto parent_path = slash == 0 ? std::string("/") : path_.substr(0, slash);
  const int parent = open(parent_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int fd = lock_fd_ >= 0 ? lock_fd_ : open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    remove_contents(fd, 0);
    close(fd);
  }
  if (parent >= 0) {
    unlinkat(parent, path_.substr(slash + 1).c_str(), AT_REMOVEDIR);
    close(parent);
  }
  lock_fd_ = -1;
  path_.clear();
}

size_t remove_orphaned_private_folders() noexcept {
  try {
    if (!own_start_time()) {
      return 0;  // no /proc to tell a live owner from a gone one
    }
    const int parent = open(temp_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) return 0;
    const int listed = dup(parent);
    DIR* dir = listed < 0 ? nullptr : fdopendir(listed);
    std::vector<std::string> names;
    if (dir != nullptr) {
      while (const dirent* entry = readdir(dir)) {
        const std::string name = entry->d_name;
        if (private_folder_owner(name)) names.push_back(name);
      }
      closedir(dir);
    } else if (listed >= 0) {
      close(listed);
    }
    size_t removed = 0;
    for (const auto& name : names) {
      removed += remove_if_orphaned(parent, name) ? 1 : 0;
    }
    close(parent);
    return removed;
  } catch (...) {
    return 0;
  }
}

}  // namespace aoti_runner
