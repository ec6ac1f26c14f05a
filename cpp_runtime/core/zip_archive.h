// Zip archives from untrusted files (tensor files, .pt2 packages), checked before
// libtorch's zip reader (miniz) sees them: that reader trusts declared sizes, offsets
// and entry paths. Pairs with python/aoti_deploy/package/zip_check.py; the entry-name
// rule is pinned by tests/contract/archive_name_vectors.json.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace aoti_runner {

struct ZipEntry {
  std::string name;
  uint64_t header_offset = 0;  // its local header
  uint64_t data_offset = 0;    // its bytes (stored, so compressed == uncompressed)
  uint64_t size = 0;
  bool is_directory = false;
  uint32_t crc32 = 0;  // as the central directory declares it
};

// Reads n bytes at offset into out; the caller has checked the range.
using ReadAt = std::function<void(uint64_t offset, void* out, size_t n)>;

// Every entry of a zip archive of `size` bytes, once all of these hold:
// - an end-of-central-directory record as the file's last 22 bytes (no comment, so
//   no reader can find another one), zip64 too, its directory inside the file;
// - every entry stored (method 0, as torch writes them), not encrypted, named by the
//   rule of zip_entry_name_problem, a regular file or a folder (no symlink or device),
//   and named once;
// - every local header where the directory says, with the same name, and every
//   entry's bytes inside the file, before the directory, overlapping no other entry.
// Throws RunnerError (kind "damaged"): "<what> is not a valid zip archive: <why>".
std::vector<ZipEntry> index_zip(uint64_t size, const ReadAt& read, const std::string& what);

// Why an entry name is refused, or "": empty, a NUL or control byte, a backslash, an
// absolute path, or a "." or ".." component (a path that could leave the folder it
// is extracted into).
std::string zip_entry_name_problem(const std::string& name);

// index_zip over bytes in memory.
std::vector<ZipEntry> index_zip_bytes(const std::vector<char>& bytes, const std::string& what);

}  // namespace aoti_runner
