#include "package_file.h"

#include "errors.h"
#include "torch_lock.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <filesystem>
#include <fstream>

namespace aoti_runner {
namespace {

std::string read_file_prefix(const std::string& path, size_t n) {
  std::ifstream file(path, std::ios::binary);
  std::string data(n, '\0');
  file.read(data.data(), static_cast<std::streamsize>(n));
  data.resize(static_cast<size_t>(file.gcount()));
  return data;
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
  std::unordered_map<std::string, std::string> metadata;
  try {
    const auto lock = lock_torch_globals();
    metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
  } catch (const std::exception& e) {
    rethrow_with_context("could not read the AOTI package " + path, e,
                         "The file is damaged or is not an AOTI package; re-create it with "
                         "`export_compile`.",
                         "damaged");
  }
  return {metadata.begin(), metadata.end()};
}

PackageSpec read_package_spec(const std::string& path) {
  return spec_from_metadata(read_package_metadata(path), path);
}

}  // namespace aoti_runner
