#include "random_inputs.h"

#include "dtypes.h"
#include "errors.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace aoti_runner {

std::vector<std::vector<int64_t>> random_input_shapes(const PackageSpec& spec) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto& input = spec.inputs[i];
    if (!is_export_dtype(input.dtype)) {
      throw RunnerError("cannot generate a random input of dtype " + input.dtype +
                            " (random inputs are float16, bfloat16, float32, float64); pass "
                            "--inputs FILE.",
                        "random_dtype");
    }
    if (!spec.example_shapes.empty()) {
      shapes.push_back(spec.example_shapes[i]);
      continue;
    }
    std::vector<int64_t> sizes;
    for (const auto& d : input.dims) {
      sizes.push_back(d.min);
    }
    shapes.push_back(sizes);
  }
  return shapes;
}

std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed) {
  const auto shapes = random_input_shapes(spec);
  auto generator = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto t = at::randn(shapes[i], generator, at::TensorOptions().dtype(at::kFloat))
                 .to(*dtype_from_name(spec.inputs[i].dtype));
    if (spec.device != "cpu") {
      t = t.to(at::Device(spec.device));
    }
    inputs.push_back(t);
  }
  return inputs;
}

}  // namespace aoti_runner
