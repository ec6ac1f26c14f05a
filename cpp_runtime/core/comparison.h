// Bit-level comparison of tensors: bit patterns through same-width integer views,
// never float equality (which calls -0.0 == +0.0 and NaN != NaN); the report line and
// the verdict over a list. Pairs with python/identity_conv/verify/bits.py; the vectors
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
  std::string detail;  // the one-line report ("identical", or the first difference)

  // Bit-identical, or (for ulp > 0) every element within `ulp` ULP of the reference.
  // 0 demands bit-identity: -0.0 against +0.0 is 0 ULP apart but not the same bits.
  bool within_ulp(int64_t ulp) const {
    return identical || (ulp > 0 && max_ulp.has_value() && *max_ulp <= static_cast<double>(ulp));
  }
};

BitReport compare_bits(const at::Tensor& actual, const at::Tensor& expected);

enum class Verdict { kPassed, kPassedWithinUlp, kFailed };

// kPassed if every report is identical (two empty lists are: nothing differs),
// kPassedWithinUlp if all are within max_ulp but some bits differ, else kFailed.
// Lists of different lengths are a failure the caller reports before this.
Verdict list_verdict(const std::vector<BitReport>& reports, int64_t max_ulp);

}  // namespace aoti_runner
