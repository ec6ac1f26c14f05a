// Seeded random inputs when the user gives no tensor file: the shapes asked for
// (--input-shape, checked against the spec), else the recorded example shapes (else
// each dim at its minimum); standard normal values drawn in float32 on the CPU, one
// input after the other from one generator, then cast, so both runtimes draw the same
// bits. An integer or bool input draws uniform int64 values (random_) from the same
// generator, then is cast: in its recorded value range, else 0 or 1
// (kDefaultRandomValues). Pairs with
// python/aoti_deploy/runtime/random_inputs.py
// (tests/contract/random_vectors.json).
#pragma once

#include "package_spec.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace aoti_runner {

using Shapes = std::vector<std::vector<int64_t>>;

// Inclusive range of a random integer or bool input without a recorded value range: 0
// and 1 are what every attention mask, flag and index into a table of two or more rows
// accepts. Python's DEFAULT_RANDOM_VALUES.
constexpr int64_t kDefaultRandomMin = 0;
constexpr int64_t kDefaultRandomMax = 1;

// The shape of each random input: `shapes` when given, else the recorded ones. Kind
// random_dtype: a dtype with no random values; for shapes the package does not accept,
// the kind input validation gives (count, rank, dim, shared_dim), led by --input-shape.
Shapes random_input_shapes(const PackageSpec& spec, const std::optional<Shapes>& shapes = std::nullopt);

// The random inputs (of `shapes`, else the recorded shapes), on the package's device.
std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed,
                                           const std::optional<Shapes>& shapes = std::nullopt);

}  // namespace aoti_runner
