#include "unpacked_package.h"

#include "digest.h"
#include "errors.h"
#include "sealed_memory.h"
#include "file_descriptor.h"
#include "zip_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace aoti_runner {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A verified load unpacks every entry it is given before the digest is compared, so it
// bounds how many (torch writes a few dozen; a package with a file per weight, a few
// thousand).
constexpr size_t kMaxHashedEntries = 65535;

// The prefix torch's loader takes for the archive's folder: the first path component
// of the first two entries, when they share one (as package_file.cpp reads it too).
std::string archive_prefix(const std::vector<ZipEntry>& entries) {
  if (entries.size() < 2) {
    return "";
  }
  const auto top = [](const std::string& name) { return name.substr(0, name.find('/')); };
  const auto first = top(entries[0].name);
  return !first.empty() && first == top(entries[1].name) ? first + "/" : "";
}

// Creates each missing folder of `relative` (a checked entry name's parent) under `root`.
void make_parents(const std::string& root, const std::string& relative) {
  for (size_t slash = relative.find('/'); slash != std::string::npos; slash = relative.find('/', slash + 1)) {
    const auto folder = root + "/" + relative.substr(0, slash);
    if (mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
      throw RunnerError("could not create " + folder + ": " + std::strerror(errno));
    }
  }
}

// Where torch's extraction puts an entry, relative to the folder, or "" for an entry the
// loader does not read (sample inputs, other models' files, folders).
std::string target_of(const ZipEntry& entry, const std::string& model_dir, const std::string& constants_dir) {
  if (entry.is_directory) {
    return "";
  }
  if (starts_with(entry.name, model_dir)) {
    return entry.name;
  }
  if (starts_with(entry.name, constants_dir)) {
    // As torch extracts them: by file name, into the model's folder, where the model
    // library and its runner look for them.
    return model_dir + entry.name.substr(entry.name.rfind('/') + 1);
  }
  return "";
}

// Creates `target` (a checked entry's place) under `dir` for writing. O_EXCL: two
// entries that would land on one file are refused, not overwritten.
int create_entry_file(const std::string& dir, const std::string& target, const ZipEntry& entry,
                      const std::string& shown) {
  const auto depth = std::count(target.begin(), target.end(), '/');
  if (depth >= kMaxFolderDepth - 1) {
    throw RunnerError("the AOTI package " + shown + " is damaged: " + entry.name + " would be unpacked " +
                          std::to_string(depth) + " folders deep; a package's files are at most " +
                          std::to_string(kMaxFolderDepth - 2) + " deep. Re-create it with export_compile.",
                      "damaged");
  }
  make_parents(dir, target);
  const auto written = dir + "/" + target;
  const int fd = open(written.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw RunnerError("could not unpack " + entry.name + " of the AOTI package " + shown + " to " + written + ": " +
                          std::strerror(errno),
                      errno == EEXIST ? "damaged" : "");
  }
  return fd;
}

void write_all(int fd, const char* bytes, size_t n, const std::string& shown) {
  for (size_t put = 0; put < n;) {
    const auto wrote = write(fd, bytes + put, n - put);
    if (wrote < 0) {
      throw RunnerError("could not write " + shown + ": " + std::strerror(errno));
    }
    put += static_cast<size_t>(wrote);
  }
}

[[noreturn]] void crc_mismatch(const ZipEntry& entry, const std::string& shown) {
  throw RunnerError("the AOTI package " + shown + " is damaged: the bytes of " + entry.name +
                        " do not match the CRC-32 its zip directory declares. Re-create it with export_compile.",
                    "damaged");
}

[[noreturn]] void changed_while_read(const std::string& shown) {
  throw RunnerError("could not read the AOTI package " + shown + " (it changed while being read?).", "damaged");
}

}  // namespace

UnpackedPackage::UnpackedPackage(const std::string& path, const std::string& shown, const std::string& model_name) {
  FileDescriptor in{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat info {};
  if (in.fd < 0 || fstat(in.fd, &info) != 0) {
    throw RunnerError("could not open the AOTI package " + shown + ": " + std::strerror(errno), "not_found");
  }
  const auto size = static_cast<uint64_t>(info.st_size);
  const auto read_at = [&](uint64_t offset, void* out, size_t n) {
    if (!pread_fully(in.fd, offset, out, n)) {
      changed_while_read(shown);
    }
  };
  const auto entries = index_zip(size, read_at, "the AOTI package " + shown);
  const auto prefix = archive_prefix(entries);
  const auto model_dir = prefix + "data/aotinductor/" + model_name + "/";
  const auto constants_dir = prefix + "data/constants/";

  folder_.emplace(kUnpackedFolderPrefix, "unpack " + shown + " into");
  const auto& dir = folder_->path();
  try {
    std::vector<char> buffer(1 << 20);
    for (const auto& entry : entries) {
      const auto target = target_of(entry, model_dir, constants_dir);
      if (target.empty()) {
        continue;
      }
      FileDescriptor out{create_entry_file(dir, target, entry, shown)};
      uLong crc = crc32(0L, Z_NULL, 0);
      for (uint64_t done = 0; done < entry.size;) {
        const auto n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), entry.size - done));
        read_at(entry.data_offset + done, buffer.data(), n);
        crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(n));
        write_all(out.fd, buffer.data(), n, dir + "/" + target);
        done += n;
      }
      if (static_cast<uint32_t>(crc) != entry.crc32) {
        crc_mismatch(entry, shown);
      }
    }
  } catch (...) {
    remove();
    throw;
  }
}

std::unique_ptr<UnpackedPackage> UnpackedPackage::hashed(const std::string& source, const std::string& shown,
                                                         const std::string& model_name) {
  std::unique_ptr<UnpackedPackage> package(new UnpackedPackage);
  const auto in = open_regular_file(source);
  struct stat info {};
  if (fstat(in->fd, &info) != 0) {
    throw RunnerError("could not read " + source + ": " + std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(info.st_size);
  // The index, read where it says and kept: the stream below must see the same bytes.
  auto& index_bytes = package->index_bytes_;
  const ReadAt read_index = [&](uint64_t offset, void* out, size_t n) {
    if (!pread_fully(in->fd, offset, out, n)) {
      changed_while_read(shown);
    }
    index_bytes.emplace_back(offset, std::string(static_cast<const char*>(out), n));
  };
  const auto entries = index_zip(size, read_index, "the AOTI package " + shown);
  if (entries.size() > kMaxHashedEntries) {
    throw RunnerError("the AOTI package " + shown + " has " + std::to_string(entries.size()) +
                          " entries; a verified load unpacks at most " + std::to_string(kMaxHashedEntries) +
                          " (an AOTI package has a few dozen).",
                      "damaged");
  }
  // The index's reads, sorted and merged into ranges that do not overlap (a byte read
  // twice must have read the same both times).
  std::sort(index_bytes.begin(), index_bytes.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<uint64_t, std::string>> merged;
  for (auto& [offset, bytes] : index_bytes) {
    if (!merged.empty() && offset <= merged.back().first + merged.back().second.size()) {
      auto& [last_offset, last] = merged.back();
      const auto overlap = std::min<uint64_t>(last_offset + last.size() - offset, bytes.size());
      if (last.compare(offset - last_offset, overlap, bytes, 0, overlap) != 0) {
        changed_while_read(shown);
      }
      last.append(bytes, overlap, std::string::npos);
    } else {
      merged.emplace_back(offset, std::move(bytes));
    }
  }
  index_bytes = std::move(merged);
  const auto prefix = archive_prefix(entries);
  const auto model_dir = prefix + "data/aotinductor/" + model_name + "/";
  const auto constants_dir = prefix + "data/constants/";

  package->folder_.emplace(kUnpackedFolderPrefix, "unpack " + shown + " into");
  const auto& dir = package->folder_->path();
  // Each entry with bytes or not (folders aside), in file order: index_zip has checked
  // that entries lie apart, before the directory. One file is open at a time. The
  // loader's entries go where torch puts them (their CRC-32 checked, as a bare load
  // checks them); of the others only what the spec check reads (JSON files and shared
  // libraries) is written, under other/, and the rest is only hashed.
  struct Part {
    const ZipEntry* entry;
    std::string target;  // empty: hashed, not written
    bool loaded;
    uLong crc;
  };
  std::vector<Part> parts;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& entry = entries[i];
    if (entry.is_directory) {
      continue;
    }
    auto target = target_of(entry, model_dir, constants_dir);
    const bool loaded = !target.empty();
    if (!loaded && (ends_with(entry.name, ".json") || ends_with(entry.name, ".so"))) {
      target = "other/" + std::to_string(i) + ".entry";
    }
    parts.push_back(Part{&entry, target, loaded, crc32(0L, Z_NULL, 0)});
  }
  std::sort(parts.begin(), parts.end(),
            [](const Part& a, const Part& b) { return a.entry->data_offset < b.entry->data_offset; });

  // Two buffers: one block is hashed on the hasher's thread while the next is read and
  // the one before written out, each from the bytes hashed.
  std::vector<char> buffers[2] = {std::vector<char>(1 << 20), std::vector<char>(1 << 20)};
  Sha256Thread hasher;
  uint64_t at = 0;
  size_t next = 0;      // the first part not yet fully written
  size_t compared = 0;  // the first index range not yet wholly compared
  FileDescriptor out;   // next's file, once opened
  for (int turn = 0;; turn ^= 1) {
    auto& buffer = buffers[turn];
    const auto got = pread(in->fd, buffer.data(), buffer.size(), static_cast<off_t>(at));
    if (got < 0) {
      throw RunnerError("could not read " + source + ": " + std::strerror(errno));
    }
    if (got == 0) {
      break;
    }
    const auto end = at + static_cast<uint64_t>(got);
    if (end > size) {
      changed_while_read(shown);  // it grew
    }
    hasher.update(buffer.data(), static_cast<size_t>(got));  // returns once the other buffer is hashed
    while (compared < index_bytes.size() &&
           index_bytes[compared].first + index_bytes[compared].second.size() <= at) {
      ++compared;
    }
    for (size_t k = compared; k < index_bytes.size() && index_bytes[k].first < end; ++k) {
      const auto& [offset, bytes] = index_bytes[k];
      const auto from = std::max(offset, at);
      const auto to = std::min<uint64_t>(offset + bytes.size(), end);
      if (from < to && std::memcmp(buffer.data() + (from - at), bytes.data() + (from - offset), to - from) != 0) {
        changed_while_read(shown);
      }
    }
    while (next < parts.size() && parts[next].entry->data_offset < end) {
      auto& part = parts[next];
      if (out.fd < 0 && !part.target.empty()) {
        out.fd = create_entry_file(dir, part.target, *part.entry, shown);
      }
      const auto last = part.entry->data_offset + part.entry->size;
      const auto from = std::max(part.entry->data_offset, at);
      const auto to = std::min(last, end);
      if (from < to && !part.target.empty()) {
        const auto* bytes = buffer.data() + (from - at);
        if (part.loaded) {
          part.crc = crc32(part.crc, reinterpret_cast<const Bytef*>(bytes), static_cast<uInt>(to - from));
        }
        write_all(out.fd, bytes, static_cast<size_t>(to - from), dir + "/" + part.target);
      }
      if (last > end) {
        break;  // it goes on in the next block
      }
      if (out.fd >= 0) {
        close(out.fd);
        out.fd = -1;
      }
      ++next;
    }
    at = end;
  }
  if (at != size || next != parts.size()) {
    changed_while_read(shown);  // it shrank
  }
  for (const auto& part : parts) {
    if (part.loaded && static_cast<uint32_t>(part.crc) != part.entry->crc32) {
      crc_mismatch(*part.entry, shown);
    }
    if (!part.target.empty()) {
      package->placed_.emplace_back(*part.entry, part.target);
    }
  }
  package->sha256_hex_ = to_hex(hasher.finish());
  package->size_ = size;
  return package;
}

PackageBytes UnpackedPackage::bytes(const std::string& shown) const {
  const auto read = [this, shown](uint64_t offset, void* out, size_t n) {
    if (!folder_) {
      throw RunnerError("internal error: the unpacked package " + shown + " was read after its folder went.");
    }
    // An entry's bytes come from its file; anything else from the index's bytes.
    const auto it = std::upper_bound(placed_.begin(), placed_.end(), offset,
                                     [](uint64_t at, const auto& placed) { return at < placed.first.data_offset; });
    if (it != placed_.begin()) {
      const auto& [entry, target] = *std::prev(it);
      if (offset + n <= entry.data_offset + entry.size) {
        const auto path = folder_->path() + "/" + target;
        FileDescriptor file{open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)};
        if (!pread_fully(file.fd, offset - entry.data_offset, out, n)) {
          throw RunnerError("could not read " + path + " (the unpacked " + entry.name + " of " + shown + ")",
                            "damaged");
        }
        return;
      }
    }
    const auto range = std::upper_bound(index_bytes_.begin(), index_bytes_.end(), offset,
                                        [](uint64_t at, const auto& read) { return at < read.first; });
    if (range != index_bytes_.begin()) {
      const auto& [at, bytes] = *std::prev(range);
      if (offset + n <= at + bytes.size()) {
        std::memcpy(out, bytes.data() + (offset - at), n);
        return;
      }
    }
    throw RunnerError("internal error: " + shown + " was read at bytes " + std::to_string(offset) + "+" +
                          std::to_string(n) + ", which its index did not read.",
                      "damaged");
  };
  return PackageBytes{size_, read, shown};
}

UnpackedPackage::~UnpackedPackage() {
  remove();
}

void UnpackedPackage::remove() noexcept {
  folder_.reset();
}

}  // namespace aoti_runner
