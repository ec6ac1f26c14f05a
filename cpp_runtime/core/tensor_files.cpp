#include "tensor_files.h"

#include "errors.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace aoti_runner {

std::vector<at::Tensor> load_tensors(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) {
    throw RunnerError("tensor file not found: " + path +
                      "\nWrite one from Python with torch.save([tensor, ...], path).");
  }
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.empty()) {
    throw RunnerError("tensor file is empty: " + path +
                      "\nWrite one from Python with torch.save([tensor, ...], path).");
  }
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    rethrow_with_context("could not read tensor file " + path, e,
                         "Expected a file written by torch.save([tensor, ...], path) "
                         "or by this runner's --outputs.");
  }
  std::vector<at::Tensor> tensors;
  if (value.isTensor()) {
    tensors.push_back(value.toTensor());
    return tensors;
  }
  if (!value.isList() && !value.isTuple()) {
    throw RunnerError("tensor file " + path + " holds a " + value.tagKind() +
                      ", expected a list of tensors.\nWrite it with "
                      "torch.save([tensor, ...], path).");
  }
  const auto elements = value.isList() ? value.toListRef().vec() : value.toTupleRef().elements().vec();
  for (size_t i = 0; i < elements.size(); ++i) {
    if (!elements[i].isTensor()) {
      throw RunnerError("tensor file " + path + ": element " + std::to_string(i) + " is of type " +
                        elements[i].tagKind() + ", expected a tensor.");
    }
    tensors.push_back(elements[i].toTensor());
  }
  return tensors;
}

void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  // A tuple pickles with no type tag. Lists of any element type get
  // torch.jit._pickle.build_tensorlist / restore_type_tag, which
  // torch.load(weights_only=True) refuses; load_tensors in Python reads tuples too.
  std::vector<c10::IValue> elements;
  for (const auto& t : tensors) {
    // torch.save writes CPU storages; move outputs off the device first.
    elements.emplace_back(t.cpu());
  }
  const auto list = c10::ivalue::Tuple::create(std::move(elements));
  const auto bytes = torch::pickle_save(c10::IValue(list));
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent);
  }
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) {
    throw RunnerError("could not write outputs to " + path);
  }
}

std::vector<at::Tensor> to_package_device(const std::vector<at::Tensor>& tensors,
                                          const PackageSpec& spec) {
  std::vector<at::Tensor> moved;
  for (const auto& t : tensors) {
    moved.push_back(spec.device == "cpu" ? t : t.to(at::Device(spec.device)));
  }
  return moved;
}

}  // namespace aoti_runner
