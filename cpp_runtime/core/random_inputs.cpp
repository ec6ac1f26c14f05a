#include "random_inputs.h"

#include "dtypes.h"
#include "errors.h"
#include "validation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <limits>
#include <optional>

namespace aoti_runner {

Shapes random_input_shapes(const PackageSpec& spec, const std::optional<Shapes>& shapes) {
  for (const auto& input : spec.inputs) {
    if (!is_export_dtype(input.dtype) && !is_integer_dtype(input.dtype)) {
      throw RunnerError("cannot generate a random input of dtype " + input.dtype +
                            " (random inputs are float16, bfloat16, float32, float64, or bool or "
                            "integer); pass --inputs FILE.",
                        "random_dtype");
    }
  }
  if (shapes) {
    // The inputs these shapes would make, checked as any input is (the count first).
    std::vector<InputDesc> inputs;
    for (size_t i = 0; i < shapes->size(); ++i) {
      InputDesc desc;
      desc.dtype = i < spec.inputs.size() ? spec.inputs[i].dtype : std::string();
      desc.shape = (*shapes)[i];
      desc.device = spec.device;
      inputs.push_back(desc);
    }
    try {
      check_inputs(inputs, spec);
    } catch (const RunnerError& e) {
      std::string message("--input-shape: ");
      message.append(e.what());
      if (e.kind() == "count") {
        message.append(" Give one --input-shape per input, in order.");
      }
      throw RunnerError(message, e.kind());
    }
    return *shapes;
  }
  Shapes recorded;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    if (!spec.example_shapes.empty()) {
      recorded.push_back(spec.example_shapes[i]);
      continue;
    }
    std::vector<int64_t> sizes;
    for (const auto& d : spec.inputs[i].dims) {
      sizes.push_back(d.min);
    }
    recorded.push_back(sizes);
  }
  return recorded;
}

std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed,
                                           const std::optional<Shapes>& requested) {
  const auto shapes = random_input_shapes(spec, requested);
  auto generator = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto dtype = *dtype_from_name(spec.inputs[i].dtype);
    at::Tensor t;
    if (is_integer_dtype(spec.inputs[i].dtype)) {
      // As in Python: uniform int64 in the range from the same generator, then cast;
      // random_'s upper bound is exclusive, and none draws up to int64's largest value.
      const auto& values = spec.inputs[i].values;
      const int64_t low = values ? values->min : kDefaultRandomMin;
      const int64_t high = values ? values->max : kDefaultRandomMax;
      const auto to = high == std::numeric_limits<int64_t>::max() ? std::optional<int64_t>()
                                                                  : std::optional<int64_t>(high + 1);
      t = at::empty(shapes[i], at::TensorOptions().dtype(at::kLong)).random_(low, to, generator).to(dtype);
    } else {
      t = at::randn(shapes[i], generator, at::TensorOptions().dtype(at::kFloat)).to(dtype);
    }
    if (spec.device != "cpu") {
      t = t.to(at::Device(spec.device));
    }
    inputs.push_back(t);
  }
  return inputs;
}

}  // namespace aoti_runner
