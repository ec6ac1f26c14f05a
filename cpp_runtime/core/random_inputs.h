// Seeded random inputs when the user gives no tensor file: the recorded example
// shapes (else each dim at its minimum), standard normal values drawn in float32 on
// the CPU then cast, so both runtimes draw the same bits. Pairs with
// python/identity_conv/runtime/random_inputs.py (tests/contract/random_vectors.json).
#pragma once

#include "package_spec.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

namespace aoti_runner {

// The shape of each random input. Kind random_dtype: a dtype with no random values.
std::vector<std::vector<int64_t>> random_input_shapes(const PackageSpec& spec);

// The random inputs, on the package's device.
std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed);

}  // namespace aoti_runner
