// The rule a comparison is held to, and its verdict: bitwise (the same bits), within
// N ULP, or close (torch.testing's |actual - expected| <= atol + rtol * |expected|,
// with its per-dtype defaults). Runtimes of one package are compared bitwise;
// compiled code against eager under a tolerance. Pairs with
// python/aoti_deploy/verify/tolerance.py; tests/contract/comparison_vectors.json
// pins both to the same report and verdict lines, word for word.
#pragma once

#include "comparison.h"

#include <ATen/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

enum class Rule { kBitwise, kUlp, kClose };

struct Tolerance {
  Rule rule = Rule::kBitwise;
  int64_t max_ulp = 0;
  // kClose: both set, or both unset for torch.testing's default for each dtype.
  std::optional<double> rtol;
  std::optional<double> atol;

  // (rtol, atol) for a tensor of `dtype` under kClose.
  std::pair<double, double> resolve(at::ScalarType dtype) const;
  // "bitwise", "within 4 ULP", "rtol 1.3e-06, atol 1e-05" (for `dtype`), or, with
  // defaults and no dtype, "torch.testing's rtol/atol for each dtype".
  std::string describe(std::optional<at::ScalarType> dtype = std::nullopt) const;
};

// torch.testing.assert_close's default (rtol, atol) for a dtype (torch.testing's
// default_tolerances; the contract tests compare this table with it).
std::pair<double, double> default_tolerance(at::ScalarType dtype);

// The rule the command-line options ask for, else `fallback`: at most one of
// --bitwise, --max-ulp N and --rtol R --atol A (which go together, as in
// torch.testing.assert_close); --max-ulp 0 is bitwise. Throws RunnerError.
Tolerance tolerance_from_options(bool bitwise, std::optional<int64_t> max_ulp,
                                 std::optional<double> rtol, std::optional<double> atol,
                                 const Tolerance& fallback);

// The spec's "eager_check" entry (package_spec.cpp parses it).
nlohmann::json tolerance_to_document(const Tolerance& tolerance);

// One tensor against its reference under a rule.
struct Comparison {
  BitReport bits;
  Tolerance tolerance;
  at::ScalarType dtype = at::kFloat;
  int64_t num_outside = 0;
  std::string first_outside;  // "[i, j]: got X, expected Y"

  // A dtype or shape difference fails, even with no element to count.
  bool passed() const {
    return num_outside == 0 && !bits.mismatched();
  }
  std::string rule() const {
    return tolerance.describe(dtype);
  }
  // The bit report, then, for a tolerance, how many elements fall outside it.
  std::string line() const;
};

// Bits first (compare_bits); differing elements are then held to the rule. kClose is
// at::isclose in double with equal_nan, as torch.testing compares: NaN must face
// NaN, ±inf the same inf. Integers with rtol and atol 0 (their default) compare
// exactly. Complex tensors are compared as their real and imaginary parts. A dtype or
// shape difference always fails.
Comparison compare(const at::Tensor& actual, const at::Tensor& expected,
                   const Tolerance& tolerance);

enum class Verdict { kPassed, kPassedWithinTolerance, kFailed };

// kPassed if every comparison is bit-identical (two empty lists are), else
// kPassedWithinTolerance if every one is within its rule, else kFailed.
Verdict list_verdict(const std::vector<Comparison>& comparisons);

// "PASSED (bit-identical)", "PASSED (NOT bit-identical, within RULE: STATS; COUNT)"
// or "FAILED (RULE: STATS; COUNT)".
std::string verdict_line(const std::vector<Comparison>& comparisons);

}  // namespace aoti_runner
