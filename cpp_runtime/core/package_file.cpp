#include "package_file.h"

#include "errors.h"
#include "file_descriptor.h"
#include "json_text.h"
#include "shared_object.h"
#include "zip_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace aoti_runner {
namespace {

std::string read_file_prefix(const std::string& path, size_t n) {
  std::ifstream file(path, std::ios::binary);
  std::string data(n, '\0');
  file.read(data.data(), static_cast<std::streamsize>(n));
  data.resize(static_cast<size_t>(file.gcount()));
  return data;
}

struct CompiledInput {
  std::string dtype;  // empty: not found
  std::map<int64_t, int64_t> static_dims;
};

constexpr const char* kDamagedHint =
    "The file is damaged or is not an AOTI package; re-create it with `export_compile`.";

// Metadata and the loader's other JSON files are small; this bounds what a crafted
// entry can make the reader allocate.
constexpr uint64_t kMaxJsonEntry = 64ull << 20;

[[noreturn]] void damaged(const std::string& path, const std::string& why) {
  throw RunnerError("could not read the AOTI package " + path + ": " + why + ".\n" + kDamagedHint, "damaged");
}

// The folder torch's loader extracts, as it finds it: "data/aotinductor/<model>" under
// the prefix the first two entries share (torch reads entry [1] unchecked).
std::string model_directory(const std::vector<ZipEntry>& entries) {
  const auto top = [](const std::string& name) { return name.substr(0, name.find('/')); };
  const auto prefix0 = top(entries[0].name);
  const auto prefix1 = top(entries[1].name);
  const std::string prefix = !prefix0.empty() && prefix0 == prefix1 ? prefix0 + "/" : "";
  return prefix + "data/aotinductor/model";
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The generated wrapper holds the compiled model's own input checks (compiled in
// whatever AOTI_RUNTIME_CHECK_INPUTS says at run time). A large model's is still
// far below this.
constexpr uint64_t kMaxWrapperSource = 256ull << 20;

// What the compiled model checks of each input, read from the wrapper source's check
// code: its dtype ("int32_t argN_expected_dtype = aoti_torch_dtype_float32();") and
// its static dims (the message lines "input_handles[I]: unmatched dim value at D, "
// then "expected: N, "). Dynamic dims' ranges are not read: AOTI checks them as >= 2
// where export allows 1, and kernels index them by the actual size.
std::map<size_t, CompiledInput> compiled_inputs(const std::string& source) {
  std::map<size_t, CompiledInput> inputs;
  std::map<std::string, size_t> handles;  // argN -> input index
  const auto number_after = [](const std::string& line, const std::string& marker, int64_t& out) {
    const auto at = line.find(marker);
    if (at == std::string::npos) {
      return false;
    }
    const auto start = at + marker.size();
    const auto end = line.find_first_not_of("0123456789", start);
    if (end == start || end == std::string::npos || end - start > 18) {
      return false;
    }
    out = std::stoll(line.substr(start, end - start));
    return true;
  };
  std::istringstream lines(source);
  std::string line;
  std::optional<std::pair<size_t, int64_t>> pending_dim;  // (input, dim) awaiting "expected: N"
  while (std::getline(lines, line)) {
    int64_t value = 0;
    if (pending_dim) {
      if (number_after(line, "\"expected: ", value)) {
        inputs[pending_dim->first].static_dims[pending_dim->second] = value;
      }
      pending_dim.reset();
    }
    if (const auto at = line.find("ConstantHandle(input_handles["); at != std::string::npos) {
      const auto name_start = line.find("ConstantHandle ");
      const auto name_end = line.find(" =");
      if (name_start != std::string::npos && name_end != std::string::npos && name_end > name_start + 15 &&
          number_after(line, "ConstantHandle(input_handles[", value)) {
        handles[line.substr(name_start + 15, name_end - name_start - 15)] = static_cast<size_t>(value);
        inputs[static_cast<size_t>(value)];
      }
    } else if (const auto dtype_at = line.find("_expected_dtype = aoti_torch_dtype_"); dtype_at != std::string::npos) {
      const auto type_start = line.find_last_of(' ', dtype_at);
      const auto handle = line.substr(type_start + 1, dtype_at - type_start - 1);
      const auto name_start = dtype_at + std::string("_expected_dtype = aoti_torch_dtype_").size();
      const auto name_end = line.find("()", name_start);
      if (const auto it = handles.find(handle); it != handles.end() && name_end != std::string::npos) {
        inputs[it->second].dtype = line.substr(name_start, name_end - name_start);
      }
    } else if (line.find(": unmatched dim value at ") != std::string::npos) {
      int64_t input = 0;
      int64_t dim = 0;
      if (number_after(line, "\"input_handles[", input) && number_after(line, ": unmatched dim value at ", dim)) {
        pending_dim = std::make_pair(static_cast<size_t>(input), dim);
      }
    }
  }
  return inputs;
}

// Everything torch's package loader would trust, checked before it runs: the zip
// structure and entry paths (it extracts under a temporary folder by name), every JSON
// file it parses (with recursion), and every shared library it would dlopen. Returns
// the metadata that torch's load_metadata_from_package would read (without torch, so
// without its shared JSON state and the lock around it): the first
// "*wrapper_metadata.json" in the model's folder, an object of strings.
// An indexed entry's bytes (so within the package).
std::string entry_bytes(const PackageBytes& package, const ZipEntry& entry) {
  std::string data(static_cast<size_t>(entry.size), '\0');
  package.read(entry.data_offset, data.data(), data.size());
  return data;
}

std::map<std::string, std::string> read_checked_metadata(const PackageBytes& package) {
  const auto& path = package.shown;
  std::vector<ZipEntry> entries;
  try {
    entries = index_zip(package.size, package.read, "it");
  } catch (const RunnerError& e) {
    std::string why = e.what();
    damaged(path, why.substr(0, why.size() - (!why.empty() && why.back() == '.')));
  }
  if (entries.size() < 2) {
    damaged(path, "it has " + std::to_string(entries.size()) + " entr" + (entries.size() == 1 ? "y" : "ies") +
                      ", and an AOTI package has its model's files");
  }
  const auto directory = model_directory(entries);
  const ZipEntry* metadata_entry = nullptr;
  for (const auto& entry : entries) {
    const bool in_model = entry.name.rfind(directory, 0) == 0;
    if (ends_with(entry.name, ".json")) {
      if (entry.size > kMaxJsonEntry) {
        damaged(path, entry.name + " is " + std::to_string(entry.size) + " bytes, larger than any AOTI JSON file");
      }
      try {
        parse_json_limited(entry_bytes(package, entry));
      } catch (const JsonTextError& e) {
        damaged(path, entry.name + " is not valid JSON (" + e.what() + ")");
      }
      if (in_model && metadata_entry == nullptr && ends_with(entry.name, "wrapper_metadata.json")) {
        metadata_entry = &entry;
      }
    }
    // Any library, wherever it sits: torch also extracts data/constants/* into the
    // model's folder (by file name) and loads the .so it finds there.
    if (ends_with(entry.name, ".so")) {
      check_shared_object(
          entry.size,
          [&](uint64_t offset, void* out, size_t n) { package.read(entry.data_offset + offset, out, n); },
          "the model library " + entry.name + " in " + path, "Re-create the package with export_compile.");
    }
  }
  if (metadata_entry == nullptr) {
    damaged(path, "it has no " + directory + "/*wrapper_metadata.json (not an AOTI package, or one of another "
                  "model name)");
  }
  const auto document = parse_json_limited(entry_bytes(package, *metadata_entry));
  if (!document.is_object()) {
    damaged(path, metadata_entry->name + " is not a JSON object");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : document.items()) {
    if (!value.is_string()) {
      damaged(path, metadata_entry->name + ": the value of " + brief_json(key) + " is not a string");
    }
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

}  // namespace

std::map<std::string, std::string> read_package_metadata(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw RunnerError("package not found: " + path +
                          "\nCreate it with `export_compile` (default output artifacts/model.pt2).",
                      "not_found");
  }
  if (!fs::is_regular_file(path, ec)) {
    throw RunnerError("package path is not a file: " + path +
                          "\nPass the .pt2 file written by export_compile.",
                      "not_found");
  }
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) {
    throw RunnerError("package is empty (0 bytes): " + path + "\nRe-create it with `export_compile`.",
                      "damaged");
  }
  const bool is_zip = read_file_prefix(path, 4) == std::string("PK\x03\x04", 4);
  if (!is_zip && fs::path(path).extension() == ".onnx") {
    throw RunnerError("this is an ONNX file, not an AOTI package: " + path +
                          "\nThe C++ runner runs .pt2 packages. Run ONNX files in onnxruntime, e.g. "
                          "with `run_inference " + path + "`.",
                      "damaged");
  }
  if (!is_zip) {
    throw RunnerError("package is not a zip archive (an AOTI .pt2 package is one): " + path +
                          "\nPass the .pt2 file written by export_compile.",
                      "damaged");
  }
  return read_checked_metadata(package_file_bytes(path));
}

PackageSpec read_package_spec(const std::string& path) {
  auto spec = spec_from_metadata(read_package_metadata(path), path);
  check_spec_against_compiled(spec, package_file_bytes(path));
  return spec;
}

PackageSpec read_package_spec(const PackageBytes& package) {
  // As read_package_metadata checks a file: a zip archive's first bytes.
  char magic[4] = {};
  try {
    if (package.size >= sizeof magic) {
      package.read(0, magic, sizeof magic);
    }
  } catch (const RunnerError&) {
  }
  if (std::string(magic, sizeof magic) != std::string("PK\x03\x04", 4)) {
    throw RunnerError("package is not a zip archive (an AOTI .pt2 package is one): " + package.shown +
                          "\nPass the .pt2 file written by export_compile.",
                      "damaged");
  }
  auto spec = spec_from_metadata(read_checked_metadata(package), package.shown);
  check_spec_against_compiled(spec, package);
  return spec;
}

PackageBytes package_file_bytes(const std::string& path) {
  auto file = std::make_shared<FileDescriptor>();
  file->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info {};
  if (file->fd < 0 || fstat(file->fd, &info) != 0) {
    throw RunnerError("could not open " + path + ": " + std::strerror(errno), "not_found");
  }
  const auto read = [file, path](uint64_t offset, void* out, size_t n) {
    if (!pread_fully(file->fd, offset, out, n)) {
      throw RunnerError("could not read " + path + " (it changed while being read?).", "damaged");
    }
  };
  return PackageBytes{static_cast<uint64_t>(info.st_size), read, path};
}

void check_spec_against_compiled(const PackageSpec& spec, const PackageBytes& package) {
  const auto& path = package.shown;
  const auto entries = index_zip(package.size, package.read, "the AOTI package " + path);
  const auto directory = model_directory(entries);
  const ZipEntry* source = nullptr;
  for (const auto& entry : entries) {
    if (entry.name.rfind(directory, 0) == 0 && ends_with(entry.name, "wrapper.cpp")) {
      source = &entry;
      break;
    }
  }
  const auto mismatch = [&](const std::string& what) {
    throw RunnerError("the package's spec does not match its compiled model: " + what +
                          ". The package is damaged or was tampered with; re-create it with export_compile.",
                      "spec_mismatch");
  };
  // Fails closed: a package without the source, or with checks this cannot read,
  // is refused rather than trusted.
  if (source == nullptr) {
    mismatch("it carries no generated wrapper source (" + directory + "/*wrapper.cpp) to check the spec against");
  }
  if (source->size > kMaxWrapperSource) {
    mismatch(source->name + " is " + std::to_string(source->size) + " bytes, larger than any generated wrapper");
  }
  const auto compiled = compiled_inputs(entry_bytes(package, *source));
  if (compiled.size() != spec.inputs.size()) {
    mismatch("the spec lists " + std::to_string(spec.inputs.size()) + " input(s), but the wrapper source checks " +
             std::to_string(compiled.size()));
  }
  for (const auto& [index, input] : compiled) {
    const std::string name = "input[" + std::to_string(index) + "]";
    if (index >= spec.inputs.size()) {
      mismatch("the compiled model takes " + name + ", which the spec does not list");
    }
    const auto& declared = spec.inputs[index];
    if (input.dtype.empty()) {
      mismatch("the wrapper source checks no dtype for " + name);
    }
    if (input.dtype != declared.dtype) {
      mismatch("the spec says " + name + " is " + declared.dtype + ", but the model was compiled for " + input.dtype);
    }
    for (const auto& [dim, size] : input.static_dims) {
      if (dim >= static_cast<int64_t>(declared.dims.size())) {
        mismatch("the model was compiled for " + name + " with a dim " + std::to_string(dim) +
                 ", which the spec does not have");
      }
      const auto& range = declared.dims[static_cast<size_t>(dim)];
      if (!range.is_static() || range.min != size) {
        mismatch("the spec says " + name + " dim " + std::to_string(dim) + " is " + range.str() +
                 ", but the model was compiled for exactly " + std::to_string(size));
      }
    }
  }
}

}  // namespace aoti_runner
