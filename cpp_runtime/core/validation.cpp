#include "validation.h"

#include "dtypes.h"
#include "errors.h"

#include <c10/util/StringUtil.h>

namespace aoti_runner {

std::optional<int64_t> checked_byte_size(const std::vector<int64_t>& shape, size_t element_size) {
  int64_t count = 1;
  for (const auto size : shape) {
    if (size < 0 || __builtin_mul_overflow(count, size, &count)) {
      return std::nullopt;
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<int64_t>(element_size), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

std::string format_sizes(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(sizes[i]);
  }
  return out + "]";
}

std::string format_sizes(const at::Tensor& t) {
  return format_sizes(t.sizes().vec());
}

InputDesc describe_input(const at::Tensor& t) {
  InputDesc desc;
  desc.dtype = dtype_name(t.scalar_type());
  desc.shape = t.sizes().vec();
  desc.device = t.device().is_cpu() ? "cpu" : t.device().str();
  // Python's spelling (c10 says "Sparse", "SparseCsr", ...), as in the messages there.
  switch (t.layout()) {
    case at::kStrided: desc.layout = "strided"; break;
    case at::kSparse: desc.layout = "sparse_coo"; break;
    case at::kSparseCsr: desc.layout = "sparse_csr"; break;
    case at::kSparseCsc: desc.layout = "sparse_csc"; break;
    case at::kSparseBsr: desc.layout = "sparse_bsr"; break;
    case at::kSparseBsc: desc.layout = "sparse_bsc"; break;
    default: desc.layout = c10::str(t.layout()); break;
  }
  return desc;
}

namespace {

// The index tuple of element k (row-major) of a tensor of `shape`.
std::vector<int64_t> position_of(int64_t k, const std::vector<int64_t>& shape) {
  std::vector<int64_t> position(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    position[d] = k % shape[d];
    k /= shape[d];
  }
  return position;
}

// Worded as value_error in python/aoti_deploy/runtime/validation.py; `label` is the
// input's tensor_label.
RunnerError value_error(const std::string& label, int64_t value, const std::vector<int64_t>& position,
                        const ValueRange& allowed) {
  return RunnerError(label + ": value " + std::to_string(value) + " at " +
                         format_sizes(position) + " is outside " + allowed.str() +
                         " (this input indexes: " + allowed.why + "). Pass values in " + allowed.str() + ".",
                     "value");
}

}  // namespace

void check_input_values(size_t index, const at::Tensor& input, const PackageSpec& spec) {
  if (index >= spec.inputs.size() || !spec.inputs[index].values || input.numel() == 0) {
    return;
  }
  const auto& allowed = *spec.inputs[index].values;
  const auto outside = input.lt(allowed.min).logical_or(input.gt(allowed.max)).reshape({-1});
  if (!outside.any().item<bool>()) {
    return;
  }
  const auto k = outside.nonzero()[0][0].item<int64_t>();
  const auto value = input.reshape({-1})[k].item<int64_t>();
  throw value_error(tensor_label("input", index, spec.inputs), value, position_of(k, input.sizes().vec()), allowed);
}

void check_values(const std::vector<at::Tensor>& inputs, const PackageSpec& spec) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_input_values(i, inputs[i], spec);
  }
}

void check_inputs(const std::vector<InputDesc>& inputs, const PackageSpec& spec) {
  if (inputs.size() != spec.inputs.size()) {
    throw RunnerError("wrong number of inputs: the package expects " +
                          std::to_string(spec.inputs.size()) + ", got " +
                          std::to_string(inputs.size()) + ".",
                      "count");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& given = inputs[i];
    const auto& expected = spec.inputs[i];
    const std::string name = tensor_label("input", i, spec.inputs);
    if (given.shape.size() != expected.dims.size()) {
      throw RunnerError(name + ": expected rank " + std::to_string(expected.dims.size()) + " " +
                            format_shape(expected) + ", got rank " +
                            std::to_string(given.shape.size()) + " " + format_sizes(given.shape) + ".",
                        "rank");
    }
    for (size_t d = 0; d < expected.dims.size(); ++d) {
      const auto size = given.shape[d];
      const auto& dim = expected.dims[d];
      if (!dim.contains(size)) {
        throw RunnerError(name + ": dim " + std::to_string(d) + " expected " + dim.wanted() + ", got " +
                              std::to_string(size) + " (shape " + format_sizes(given.shape) +
                              ", package expects " + format_shape(expected) + ").",
                          "dim");
      }
    }
    if (given.dtype != expected.dtype) {
      // Re-exporting is a fix only for a dtype export_compile builds for.
      const std::string reexport = is_export_dtype(given.dtype)
                                       ? ", or re-export the package with --dtype " + given.dtype
                                       : "";
      throw RunnerError(name + ": expected dtype " + expected.dtype + ", got " + given.dtype +
                            ". Convert the input to " + expected.dtype + reexport + ".",
                        "dtype");
    }
    const auto type_of = [](const std::string& device) { return device.substr(0, device.find(':')); };
    if (type_of(given.device) != type_of(spec.device)) {
      throw RunnerError(name + ": expected a tensor on " + spec.device + ", got one on " +
                            given.device + ".",
                        "device");
    }
    if (given.layout != "strided") {
      throw RunnerError(name + ": expected a dense (strided) tensor, got layout " + given.layout + ".",
                        "layout");
    }
  }
  for (const auto& group : spec.shared_dims) {
    const auto [i0, d0] = group.front();
    const auto first = inputs[static_cast<size_t>(i0)].shape[static_cast<size_t>(d0)];
    for (size_t k = 1; k < group.size(); ++k) {
      const auto [i, d] = group[k];
      const auto size = inputs[static_cast<size_t>(i)].shape[static_cast<size_t>(d)];
      if (size != first) {
        throw RunnerError(tensor_label("input", static_cast<size_t>(i), spec.inputs) + ": dim " +
                              std::to_string(d) + " must equal " +
                              tensor_label("input", static_cast<size_t>(i0), spec.inputs) + " dim " +
                              std::to_string(d0) +
                              " (the package compiled them as one dynamic size), got " +
                              std::to_string(size) + " and " + std::to_string(first) + ".",
                          "shared_dim");
      }
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& allowed = spec.inputs[i].values;
    const auto& given = inputs[i].values;
    if (!allowed || !given) {
      continue;
    }
    for (size_t k = 0; k < given->size(); ++k) {
      const auto value = (*given)[k];
      if (value < allowed->min || value > allowed->max) {
        throw value_error(tensor_label("input", i, spec.inputs), value,
                          position_of(static_cast<int64_t>(k), inputs[i].shape), *allowed);
      }
    }
  }
}

std::vector<at::Tensor> validate_inputs(const std::vector<at::Tensor>& inputs,
                                        const PackageSpec& spec) {
  std::vector<InputDesc> descs;
  for (const auto& t : inputs) {
    descs.push_back(describe_input(t));
  }
  check_inputs(descs, spec);
  check_values(inputs, spec);
  std::vector<at::Tensor> ready;
  for (const auto& t : inputs) {
    ready.push_back(t.resolve_conj().resolve_neg().contiguous());
  }
  return ready;
}

}  // namespace aoti_runner
