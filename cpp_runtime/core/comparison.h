// Bit-level comparison of tensors: bit patterns through same-width integer views,
// never float equality (which calls -0.0 == +0.0 and NaN != NaN), and the report
// line. tolerance.h holds the rules and the verdict. Pairs with python/aoti_deploy/verify/bits.py; the vectors
// in tests/contract/comparison_vectors.json pin both to the same report, word for word.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace aoti_runner {

struct BitReport {
  bool identical = false;
  int64_t numel = 0;
  int64_t num_differ = 0;
  // Largest distance in units in the last place; -0.0 vs +0.0 is 0, NaN vs NaN 0,
  // NaN vs a number infinite. Unset when dtype or shape differ.
  std::optional<double> max_ulp;
  // Over elements where both values are finite (relative: where expected != 0).
  std::optional<double> max_abs_diff;
  std::optional<double> max_rel_diff;
  std::string detail;  // the one-line report ("identical", or the first difference)

  // dtype or shape differ: `detail` says which, and nothing was measured.
  bool mismatched() const {
    return !identical && !max_ulp.has_value();
  }
};

BitReport compare_bits(const at::Tensor& actual, const at::Tensor& expected);

// printf %.9g, with NaN spelled "nan" whatever its sign, as both runtimes print numbers.
std::string format_number(double value);
// A ULP distance: an integer, or "inf".
std::string format_ulp(double value);

// A complex tensor as its (real, imaginary) parts (a trailing dim of 2), on the CPU
// and contiguous; any other tensor as it is.
at::Tensor as_real(const at::Tensor& tensor);

// Distance in ULP, element-wise and flat, as double (see bits.py's ulp_distance).
at::Tensor ulp_distance(const at::Tensor& actual, const at::Tensor& expected);

}  // namespace aoti_runner
