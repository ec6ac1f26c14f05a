#include "unpacked_package.h"

#include "errors.h"
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

}  // namespace

UnpackedPackage::UnpackedPackage(const std::string& path, const std::string& shown, const std::string& model_name) {
  FileDescriptor in{open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat info {};
  if (in.fd < 0 || fstat(in.fd, &info) != 0) {
    throw RunnerError("could not open the AOTI package " + shown + ": " + std::strerror(errno), "not_found");
  }
  const auto size = static_cast<uint64_t>(info.st_size);
  const auto read_at = [&](uint64_t offset, void* out, size_t n) {
    auto* bytes = static_cast<char*>(out);
    for (size_t done = 0; done < n;) {
      const auto got = pread(in.fd, bytes + done, n - done, static_cast<off_t>(offset + done));
      if (got <= 0) {
        throw RunnerError("could not read the AOTI package " + shown + " (it changed while being read?).",
                          "damaged");
      }
      done += static_cast<size_t>(got);
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
      std::string target;
      if (entry.is_directory) {
        continue;
      } else if (starts_with(entry.name, model_dir)) {
        target = entry.name;
      } else if (starts_with(entry.name, constants_dir)) {
        // As torch extracts them: by file name, into the model's folder, where the model
        // library and its runner look for them.
        target = model_dir + entry.name.substr(entry.name.rfind('/') + 1);
      } else {
        continue;  // not the model's (sample inputs, other models' files, ...)
      }
      make_parents(dir, target);
      const auto written = dir + "/" + target;
      // O_EXCL: two entries that would land on one file are refused, not overwritten.
      FileDescriptor out{open(written.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
      if (out.fd < 0) {
        throw RunnerError("could not unpack " + entry.name + " of the AOTI package " + shown + " to " + written +
                              ": " + std::strerror(errno),
                          errno == EEXIST ? "damaged" : "");
      }
      uLong crc = crc32(0L, Z_NULL, 0);
      for (uint64_t done = 0; done < entry.size;) {
        const auto n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), entry.size - done));
        read_at(entry.data_offset + done, buffer.data(), n);
        crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(n));
        for (size_t put = 0; put < n;) {
          const auto wrote = write(out.fd, buffer.data() + put, n - put);
          if (wrote < 0) {
            throw RunnerError("could not write " + written + ": " + std::strerror(errno));
          }
          put += static_cast<size_t>(wrote);
        }
        done += n;
      }
      if (static_cast<uint32_t>(crc) != entry.crc32) {
        throw RunnerError("the AOTI package " + shown + " is damaged: the bytes of " + entry.name +
                              " do not match the CRC-32 its zip directory declares. Re-create it with "
                              "export_compile.",
                          "damaged");
      }
    }
  } catch (...) {
    remove();
    throw;
  }
}

UnpackedPackage::~UnpackedPackage() {
  remove();
}

void UnpackedPackage::remove() noexcept {
  folder_.reset();
}

}  // namespace aoti_runner
