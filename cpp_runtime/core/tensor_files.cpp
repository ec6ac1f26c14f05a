#include "tensor_files.h"

#include "errors.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
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
  // The same words as python/identity_conv/runtime/tensor_files.py.
  const std::string not_a_tensor_file = path + " is not a tensor file";
  const std::string format =
      "A tensor file is a list of tensors saved with torch.save([tensor, ...], path), or a "
      "runner's --outputs.";
  // torch.save writes a zip archive ("PK" first); anything else (a text file) would
  // reach the archive reader, whose message speaks of corrupted checkpoints.
  if (bytes.size() < 4 || bytes[0] != 'P' || bytes[1] != 'K') {
    throw RunnerError(not_a_tensor_file +
                      ": it is not a zip archive, the format torch.save writes. " + format);
  }
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    std::string reason = e.what();
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
      reason = c10_error->what_without_backtrace();
    }
    reason = reason.substr(0, reason.find('\n'));
    std::string message = not_a_tensor_file;
    message.append(": torch::pickle_load could not read it (").append(reason).append("). ").append(format);
    throw RunnerError(message);
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
