// Input validation against the package spec: count, rank, each dim, dtype, device,
// layout, then shared dims. AOTI checks none of these by default and reads out of
// bounds or returns garbage on a wrong input. The decision is made on InputDesc, so
// the vectors in tests/contract/validation_vectors.json pin it against
// python/aoti_deploy/runtime/validation.py without building tensors.
#pragma once

#include "package_spec.h"

#include <ATen/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace aoti_runner {

struct InputDesc {
  std::string dtype;  // Python spelling
  std::vector<int64_t> shape;
  std::string device = "cpu";
  std::string layout = "strided";
  // The elements in row-major order, when known (the contract vectors give them);
  // runtimes check tensors' values with check_values instead.
  std::optional<std::vector<int64_t>> values;
};

InputDesc describe_input(const at::Tensor& t);

// Throws a one-line RunnerError on the first mismatch. Kinds: count, rank, dim, dtype,
// device, layout, shared_dim, value (only for inputs whose values are given).
void check_inputs(const std::vector<InputDesc>& inputs, const PackageSpec& spec);

// Throws a one-line RunnerError (kind "value") for the first element, in row-major
// order, of input `index` outside its recorded value range; none when it has no range.
// Call after check_inputs passed (the dtypes match).
void check_input_values(size_t index, const at::Tensor& input, const PackageSpec& spec);

// check_input_values on every input.
void check_values(const std::vector<at::Tensor>& inputs, const PackageSpec& spec);

// check_inputs and check_values on the tensors, then copies ready for AOTI (lazy negation/conjugation
// applied, contiguous: AOTI reads dense row-major buffers).
std::vector<at::Tensor> validate_inputs(const std::vector<at::Tensor>& inputs,
                                        const PackageSpec& spec);

// The bytes of a dense tensor of this shape, or nullopt when a size is negative or the
// element count or the byte count does not fit an int64 (torch's numel and nbytes).
std::optional<int64_t> checked_byte_size(const std::vector<int64_t>& shape, size_t element_size);

std::string format_sizes(const std::vector<int64_t>& sizes);
std::string format_sizes(const at::Tensor& t);

}  // namespace aoti_runner
