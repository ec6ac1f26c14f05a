#include "zip_archive.h"

#include "errors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace aoti_runner {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndRecord = 0x06054b50;
constexpr uint32_t kZip64EndRecord = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr size_t kEndRecordSize = 22;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kZip64EndRecordSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint8_t kUnixHost = 3;

uint16_t u16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t u64(const unsigned char* p) {
  return static_cast<uint64_t>(u32(p)) | (static_cast<uint64_t>(u32(p + 4)) << 32);
}

// offset + length <= limit, without wrapping.
bool fits(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

class Checker {
 public:
  Checker(uint64_t size, const ReadAt& read, const std::string& what) : size_(size), read_(read), what_(what) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw RunnerError(what_ + " is not a valid zip archive: " + why + ".", "damaged");
  }

  std::vector<unsigned char> bytes(uint64_t offset, uint64_t n, const char* part) const {
    if (!fits(offset, n, size_)) {
      fail(std::string("its ") + part + " lies outside the file (the file is truncated or damaged)");
    }
    std::vector<unsigned char> out(static_cast<size_t>(n));
    if (n > 0) {
      read_(offset, out.data(), static_cast<size_t>(n));
    }
    return out;
  }

  std::vector<ZipEntry> run() {
    find_end_record();
    std::vector<ZipEntry> entries;
    std::set<std::string> names;
    uint64_t position = directory_offset_;
    const uint64_t directory_end = directory_offset_ + directory_size_;
    for (uint64_t i = 0; i < entry_count_; ++i) {
      if (!fits(position, kCentralHeaderSize, directory_end)) {
        fail("its central directory is shorter than the " + std::to_string(entry_count_) + " entries it declares");
      }
      const auto header = bytes(position, kCentralHeaderSize, "central directory");
      if (u32(header.data()) != kCentralHeader) {
        fail("central directory entry " + std::to_string(i) + " has no valid signature");
      }
      const uint8_t host = header[5];
      const uint16_t flags = u16(&header[8]);
      const uint16_t method = u16(&header[10]);
      const uint32_t crc32 = u32(&header[16]);
      uint64_t compressed = u32(&header[20]);
      uint64_t uncompressed = u32(&header[24]);
      const uint16_t name_length = u16(&header[28]);
      const uint16_t extra_length = u16(&header[30]);
      const uint16_t comment_length = u16(&header[32]);
      const uint32_t external = u32(&header[38]);
      uint64_t local = u32(&header[42]);
      const uint64_t variable = static_cast<uint64_t>(name_length) + extra_length + comment_length;
      if (!fits(position + kCentralHeaderSize, variable, directory_end)) {
        fail("central directory entry " + std::to_string(i) + " runs past the directory");
      }
      const auto tail = bytes(position + kCentralHeaderSize, variable, "central directory");
      ZipEntry entry;
      entry.name.assign(reinterpret_cast<const char*>(tail.data()), name_length);
      const std::string shown = "entry " + std::to_string(i) + " ('" + printable(entry.name) + "')";
      if (const auto problem = zip_entry_name_problem(entry.name); !problem.empty()) {
        fail(shown + " " + problem);
      }
      if (!names.insert(entry.name).second) {
        fail(shown + " appears twice");
      }
      read_zip64_extra(tail.data() + name_length, extra_length, uncompressed, compressed, local, shown);
      if (flags & 0x1) {
        fail(shown + " is encrypted");
      }
      if (method != 0) {
        fail(shown + " is compressed (method " + std::to_string(method) +
             "); torch writes every entry stored (method 0)");
      }
      if (compressed != uncompressed) {
        fail(shown + " is stored but declares " + std::to_string(compressed) + " stored and " +
             std::to_string(uncompressed) + " unpacked bytes");
      }
      const uint32_t mode = external >> 16;
      entry.is_directory = !entry.name.empty() && entry.name.back() == '/';
      // torch writes permission bits only (0600, no file type): a type, when given, must fit.
      if (host == kUnixHost && (mode & S_IFMT) != 0) {
        if (S_ISLNK(mode)) {
          fail(shown + " is a symbolic link");
        }
        if (!S_ISREG(mode) && !S_ISDIR(mode)) {
          fail(shown + " is neither a regular file nor a folder (mode " + std::to_string(mode) + ")");
        }
        if (S_ISDIR(mode) != entry.is_directory) {
          fail(shown + "'s type does not match its name");
        }
      }
      entry.header_offset = local;
      entry.size = compressed;
      entry.crc32 = crc32;
      read_local_header(entry, shown);
      entries.push_back(std::move(entry));
      position += kCentralHeaderSize + variable;
    }
    // Entries must not overlap each other (a crafted archive may point two names at
    // one range, or a header into another entry's bytes).
    std::vector<const ZipEntry*> by_offset;
    for (const auto& entry : entries) {
      by_offset.push_back(&entry);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const ZipEntry* a, const ZipEntry* b) { return a->header_offset < b->header_offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      if (by_offset[i - 1]->data_offset + by_offset[i - 1]->size > by_offset[i]->header_offset) {
        fail("entries '" + printable(by_offset[i - 1]->name) + "' and '" + printable(by_offset[i]->name) +
             "' overlap");
      }
    }
    return entries;
  }

 private:
  static std::string printable(const std::string& name) {
    std::string out;
    for (const char c : name.substr(0, 200)) {
      const auto byte = static_cast<unsigned char>(c);
      out += (byte < 0x20 || byte == 0x7f) ? '?' : c;
    }
    return name.size() > 200 ? out + "..." : out;
  }

  // The end record must be the file's last 22 bytes (no archive comment; torch writes
  // none). A comment would let two readers pick different end records: miniz takes the
  // last end-record signature with room after it, whatever its comment length says,
  // so a comment can hide a second archive that torch reads and this check does not.
  uint64_t find_end_record() {
    if (size_ < kEndRecordSize) {
      fail("it is " + std::to_string(size_) + " bytes long, shorter than a zip's end record");
    }
    const uint64_t end = size_ - kEndRecordSize;
    const auto record = bytes(end, kEndRecordSize, "end record");
    const unsigned char* p = record.data();
    if (u32(p) != kEndRecord) {
      fail("it does not end with an end-of-central-directory record (a truncated file, a zip with a comment, "
           "or not a zip archive)");
    }
    if (u16(p + 20) != 0) {
      fail("its end record declares a comment, but it ends the file");
    }
    if (u16(p + 4) != 0 || u16(p + 6) != 0 || u16(p + 8) != u16(p + 10)) {
      fail("it spans several disks");
    }
    entry_count_ = u16(p + 10);
    directory_size_ = u32(p + 12);
    directory_offset_ = u32(p + 16);
    uint64_t directory_limit = end;
    if (entry_count_ == 0xFFFF || directory_size_ == 0xFFFFFFFF || directory_offset_ == 0xFFFFFFFF) {
      directory_limit = read_zip64_end(end);
    }
    if (!fits(directory_offset_, directory_size_, directory_limit)) {
      fail("its central directory (" + std::to_string(directory_size_) + " bytes at offset " +
           std::to_string(directory_offset_) + ") lies outside the file");
    }
    // Each entry takes at least a fixed header: bounds what the count may claim.
    if (entry_count_ > directory_size_ / kCentralHeaderSize) {
      fail("it declares " + std::to_string(entry_count_) + " entries in a central directory of " +
           std::to_string(directory_size_) + " bytes");
    }
    return end;
  }

  uint64_t read_zip64_end(uint64_t end) {
    if (end < kZip64LocatorSize) {
      fail("its zip64 locator is missing");
    }
    const auto locator = bytes(end - kZip64LocatorSize, kZip64LocatorSize, "zip64 locator");
    if (u32(locator.data()) != kZip64Locator) {
      fail("its zip64 locator is missing");
    }
    const uint64_t record_offset = u64(&locator[8]);
    if (!fits(record_offset, kZip64EndRecordSize, end - kZip64LocatorSize)) {
      fail("its zip64 end record lies outside the file");
    }
    const auto record = bytes(record_offset, kZip64EndRecordSize, "zip64 end record");
    if (u32(record.data()) != kZip64EndRecord) {
      fail("its zip64 end record has no valid signature");
    }
    if (u64(&record[24]) != u64(&record[32])) {
      fail("it spans several disks");
    }
    entry_count_ = u64(&record[32]);
    directory_size_ = u64(&record[40]);
    directory_offset_ = u64(&record[48]);
    return record_offset;
  }

  // The zip64 extra field (id 1) holds, in order, each 32-bit field set to all ones.
  void read_zip64_extra(const unsigned char* extra, uint16_t length, uint64_t& uncompressed, uint64_t& compressed,
                        uint64_t& local, const std::string& shown) const {
    size_t at = 0;
    while (at + 4 <= length) {
      const uint16_t id = u16(extra + at);
      const uint16_t field_length = u16(extra + at + 2);
      if (at + 4 + field_length > length) {
        fail(shown + " has a damaged extra field");
      }
      if (id == 1) {
        size_t used = 0;
        for (uint64_t* value : {&uncompressed, &compressed, &local}) {
          if (*value != 0xFFFFFFFF) {
            continue;
          }
          if (used + 8 > field_length) {
            fail(shown + " has a short zip64 field");
          }
          *value = u64(extra + at + 4 + used);
          used += 8;
        }
      }
      at += 4 + static_cast<size_t>(field_length);
    }
  }

  void read_local_header(ZipEntry& entry, const std::string& shown) const {
    if (!fits(entry.header_offset, kLocalHeaderSize, directory_offset_)) {
      fail(shown + "'s local header lies outside the file's entries");
    }
    const auto header = bytes(entry.header_offset, kLocalHeaderSize, "local header");
    if (u32(header.data()) != kLocalHeader) {
      fail(shown + "'s local header has no valid signature");
    }
    const uint16_t name_length = u16(&header[26]);
    const uint16_t extra_length = u16(&header[28]);
    const uint64_t data = entry.header_offset + kLocalHeaderSize + name_length + extra_length;
    if (!fits(entry.header_offset + kLocalHeaderSize, static_cast<uint64_t>(name_length) + extra_length,
              directory_offset_)) {
      fail(shown + "'s local header runs past the file's entries");
    }
    const auto name = bytes(entry.header_offset + kLocalHeaderSize, name_length, "local header");
    if (std::string(reinterpret_cast<const char*>(name.data()), name.size()) != entry.name) {
      fail(shown + "'s local header names another file");
    }
    if (!fits(data, entry.size, directory_offset_)) {
      fail(shown + " declares " + std::to_string(entry.size) + " bytes, more than the file holds");
    }
    entry.data_offset = data;
  }

  uint64_t size_;
  const ReadAt& read_;
  std::string what_;
  uint64_t entry_count_ = 0;
  uint64_t directory_size_ = 0;
  uint64_t directory_offset_ = 0;
};

}  // namespace

std::string zip_entry_name_problem(const std::string& name) {
  if (name.empty()) {
    return "has an empty name";
  }
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return "has a control character in its name";
    }
    if (c == '\\') {
      return "has a backslash in its name";
    }
  }
  if (name.front() == '/') {
    return "is an absolute path";
  }
  size_t start = 0;
  while (start <= name.size()) {
    auto slash = name.find('/', start);
    if (slash == std::string::npos) {
      slash = name.size();
    }
    const auto part = name.substr(start, slash - start);
    if (part == "..") {
      return "has a '..' component (it would be extracted outside its folder)";
    }
    if (part == ".") {
      return "has a '.' component";
    }
    start = slash + 1;
  }
  return "";
}

std::vector<ZipEntry> index_zip(uint64_t size, const ReadAt& read, const std::string& what) {
  return Checker(size, read, what).run();
}

std::vector<ZipEntry> index_zip_bytes(const std::vector<char>& bytes, const std::string& what) {
  const ReadAt read = [&](uint64_t offset, void* out, size_t n) {
    std::memcpy(out, bytes.data() + offset, n);
  };
  return index_zip(bytes.size(), read, what);
}

}  // namespace aoti_runner
