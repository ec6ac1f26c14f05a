#include "tensor_files.h"

#include "dtypes.h"
#include "errors.h"
#include "json_text.h"
#include "pickle_check.h"
#include "text.h"
#include "zip_archive.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/serialize.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>

namespace aoti_runner {

namespace {

// torch::pickle_load, with every storage record's size noted by its data pointer:
// the unpickler sizes a storage by the numel its pickle declares, whatever the record
// holds, so a short record would be read past its end. Each record is read once, as
// torch.load does: torch.save names a storage again for every view of it, and without
// the storage context each name read a fresh copy (800 views of a 1 MiB storage, a
// 1.1 MiB file, read 800 MiB; a crafted 64 KB one ran the fuzzer out of memory).
c10::IValue unpickle_tensor_file(const std::vector<char>& bytes, std::map<const void*, size_t>& record_sizes) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_shared<caffe2::serialize::MemoryReadAdapter>(bytes.data(), static_cast<off_t>(bytes.size())));
  // Not a structured binding: clang before 16 cannot capture one in the lambda below.
  auto pickle_record = reader.getRecord("data.pkl");
  const auto& pickle = std::get<0>(pickle_record);
  const size_t pickle_size = std::get<1>(pickle_record);
  const auto* pickle_bytes = static_cast<const char*>(pickle.get());
  // The unpickler allocates what an opcode declares before reading it, and grows its
  // memo to any id it is given.
  if (const auto problem = pickle_problem(pickle_bytes, pickle_size); !problem.empty()) {
    throw std::runtime_error("data.pkl: " + problem);
  }
  size_t position = 0;
  const auto read = [&](char* out, size_t n) -> size_t {
    const size_t count = std::min(n, pickle_size - position);
    std::copy(pickle_bytes + position, pickle_bytes + position + count, out);
    position += count;
    return count;
  };
  const auto read_record = [&](const std::string& key) {
    auto [data, size] = reader.getRecord("data/" + key);
    record_sizes[data.get()] = size;
    return std::move(data);
  };
  torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::Device(c10::kCPU), false,
                                  torch::jit::Unpickler::defaultTypeParser,
                                  std::make_shared<torch::jit::DeserializationStorageContext>());
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

// bytes = a * b + c, or nullopt past uint64.
std::optional<uint64_t> multiply_add(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t product = 0;
  uint64_t sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) {
    return std::nullopt;
  }
  return sum;
}

// Each tensor must be a dense CPU tensor whose storage lies within the record it was
// read from, and whose view (offset, sizes, strides) lies within its storage.
// `labels` name the tensors in messages ("tensor 0", "tensor 'input_ids'").
void check_tensors_within_records(const std::vector<at::Tensor>& tensors, const std::vector<std::string>& labels,
                                  const std::map<const void*, size_t>& record_sizes, const std::string& path) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const std::string where = "tensor file " + path + ": " + labels[i];
    const std::string fix = " Write the file again with torch.save([tensor, ...], path).";
    if (t.layout() != at::kStrided || t.is_quantized()) {
      throw RunnerError(where + " is not a dense tensor (layout " + c10::str(t.layout()) + ", " +
                        c10::str(t.scalar_type()) + ")." + fix);
    }
    if (!t.device().is_cpu()) {
      throw RunnerError(where + " is stored on " + t.device().str() + "; a tensor file holds CPU tensors." + fix);
    }
    if (!dtype_from_name(dtype_name(t.scalar_type()))) {
      // Not a dtype a package takes or returns (e.g. torch's uint1..uint7 bit types,
      // which most kernels, even a copy, do not implement).
      throw RunnerError(where + " has dtype " + c10::toString(t.scalar_type()) +
                        ", which no package takes or returns." + fix);
    }
    const auto storage_bytes = static_cast<uint64_t>(t.storage().nbytes());
    if (storage_bytes > 0) {
      const auto record = record_sizes.find(t.storage().data());
      if (record == record_sizes.end()) {
        throw RunnerError(where + " has a storage that was not read from the file." + fix);
      }
      if (storage_bytes > record->second) {
        throw RunnerError(where + " declares a storage of " + std::to_string(storage_bytes) +
                          " bytes, but its record in the file holds " + std::to_string(record->second) +
                          " (a truncated or crafted file)." + fix);
      }
    }
    if (t.numel() == 0) {
      continue;
    }
    // The last element's offset, in elements: offset + sum((size - 1) * stride).
    std::optional<uint64_t> last = t.storage_offset() >= 0 ? std::optional<uint64_t>(t.storage_offset()) : std::nullopt;
    for (int64_t d = 0; d < t.dim() && last; ++d) {
      if (t.stride(d) < 0) {
        last = std::nullopt;
        break;
      }
      last = multiply_add(static_cast<uint64_t>(t.size(d) - 1), static_cast<uint64_t>(t.stride(d)), *last);
    }
    const auto needed = last ? multiply_add(*last + 1, t.element_size(), 0) : std::nullopt;
    if (!needed || *needed > storage_bytes) {
      throw RunnerError(where + " (sizes " + c10::str(t.sizes()) + ", strides " + c10::str(t.strides()) +
                        ", offset " + std::to_string(t.storage_offset()) + ") reaches past its storage of " +
                        std::to_string(storage_bytes) + " bytes (a crafted file)." + fix);
    }
  }
}

// Names read from a file, for messages: each quoted and cut (brief_json), the first
// eight of them.
std::string shown_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) {
    shown.push_back(brief_json(keys[i]));
  }
  if (keys.size() > 8) {
    shown.push_back("and " + std::to_string(keys.size() - 8) + " more");
  }
  return join(shown, ", ");
}

// A dict of name -> tensor, in the order of `names` (the package's names of its
// `role`s), with each tensor's label for messages. Worded as
// python/aoti_deploy/runtime/tensor_files.py's _tensors_by_name.
std::vector<at::Tensor> tensors_by_name(const c10::Dict<c10::IValue, c10::IValue>& dict,
                                        const std::vector<std::string>& names, const std::string& role,
                                        const std::string& path, std::vector<std::string>& labels) {
  std::vector<std::string> keys;
  for (const auto& entry : dict) {
    if (!entry.key().isString()) {
      throw RunnerError("tensor file " + path + " holds a dict with a key of type " + entry.key().tagKind() +
                        "; the keys of a tensor file's dict are tensor names (strings).");
    }
    const auto key = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      throw RunnerError("tensor file " + path + ": the entry " + brief_json(key) + " is of type " +
                        entry.value().tagKind() + ", expected a tensor.");
    }
    keys.push_back(key);
  }
  if (names.empty()) {
    throw RunnerError("tensor file " + path + " holds tensors by name (" + shown_keys(keys) +
                      "), but the package records no " + role + " names.\nWrite a list in the package's " + role +
                      " order with torch.save([tensor, ...], path).");
  }
  std::vector<std::string> missing;
  std::vector<std::string> unknown;
  for (const auto& name : names) {
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) {
      missing.push_back(name);
    }
  }
  for (const auto& key : keys) {
    if (std::find(names.begin(), names.end(), key) == names.end()) {
      unknown.push_back(key);
    }
  }
  if (!missing.empty() || !unknown.empty()) {
    std::vector<std::string> problems;
    if (!missing.empty()) {
      problems.push_back("missing " + role + "(s) " + join(missing, ", "));
    }
    if (!unknown.empty()) {
      problems.push_back("unknown name(s) " + shown_keys(unknown));
    }
    throw RunnerError("tensor file " + path + ": " + join(problems, "; ") + ". The package's " + role + "s are " +
                      join(names, ", ") + ": save a dict with exactly these names, or a list in this order.");
  }
  std::vector<at::Tensor> tensors;
  for (const auto& name : names) {
    tensors.push_back(dict.at(c10::IValue(name)).toTensor());
    labels.push_back("tensor '" + name + "'");
  }
  return tensors;
}

}  // namespace

std::vector<at::Tensor> load_tensors(const std::string& path, const std::vector<std::string>& names,
                                     const std::string& role) {
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
  // The same words as python/aoti_deploy/runtime/tensor_files.py.
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
  // The zip structure first: libtorch's reader trusts it.
  try {
    index_zip_bytes(bytes, "it");
  } catch (const RunnerError& e) {
    std::string why = e.what();
    throw RunnerError(not_a_tensor_file + ": " + why.substr(0, why.size() - (!why.empty() && why.back() == '.')) +
                      ". " + format);
  }
  c10::IValue value;
  std::map<const void*, size_t> record_sizes;
  try {
    value = unpickle_tensor_file(bytes, record_sizes);
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
  std::vector<std::string> labels;
  if (value.isTensor()) {
    tensors.push_back(value.toTensor());
    check_tensors_within_records(tensors, {"tensor 0"}, record_sizes, path);
    return tensors;
  }
  if (value.isGenericDict()) {
    tensors = tensors_by_name(value.toGenericDict(), names, role, path, labels);
    check_tensors_within_records(tensors, labels, record_sizes, path);
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
    labels.push_back("tensor " + std::to_string(i));
  }
  check_tensors_within_records(tensors, labels, record_sizes, path);
  return tensors;
}

namespace {

// torch::pickle_save, but with no type tags: it tags a dict (and a list) with
// torch.jit._pickle.restore_type_tag, which torch.load(weights_only=True) refuses. A
// tuple pickles the same either way.
std::vector<char> pickle_untagged(const c10::IValue& value) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    archive.insert(archive.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  // The records torch::pickle_save writes: each tensor's storage as data/<i>, then data.pkl.
  const auto& tensors = pickler.tensorData();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto storage = torch::jit::getWriteableTensorData(tensors[i]);
    writer.writeRecord("data/" + std::to_string(i), storage.data(), storage.sizeInBytes());
  }
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeEndOfFile();
  return archive;
}

}  // namespace

void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors,
                  const std::vector<std::string>& names) {
  if (!names.empty() && names.size() != tensors.size()) {
    throw RunnerError("could not write outputs to " + path + ": " + std::to_string(tensors.size()) +
                      " tensor(s) for " + std::to_string(names.size()) + " name(s)");
  }
  // A tuple, not a list: lists of any element type get torch.jit._pickle.build_tensorlist,
  // which torch.load(weights_only=True) refuses; load_tensors in Python reads tuples too.
  // torch.save writes CPU storages, so the outputs move off the device first.
  c10::IValue value;
  if (names.empty()) {
    std::vector<c10::IValue> elements;
    for (const auto& t : tensors) {
      elements.emplace_back(t.cpu());
    }
    value = c10::ivalue::Tuple::create(std::move(elements));
  } else {
    c10::Dict<std::string, at::Tensor> by_name;
    for (size_t i = 0; i < tensors.size(); ++i) {
      by_name.insert(names[i], tensors[i].cpu());
    }
    value = by_name;
  }
  const auto bytes = pickle_untagged(value);
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
