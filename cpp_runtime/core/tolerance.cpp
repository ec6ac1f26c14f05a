#include "tolerance.h"

#include "errors.h"
#include "text.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace aoti_runner {
std::pair<double, double> default_tolerance(at::ScalarType dtype) {
  // torch.testing._comparison's _DTYPE_PRECISIONS; every other dtype compares exactly.
  switch (dtype) {
    case at::kHalf:
    case at::kComplexHalf:
      return {0.001, 1e-5};
    case at::kBFloat16:
      return {0.016, 1e-5};
    case at::kFloat:
    case at::kComplexFloat:
      return {1.3e-6, 1e-5};
    case at::kDouble:
    case at::kComplexDouble:
      return {1e-7, 1e-7};
    default:
      return {0.0, 0.0};
  }
}

std::pair<double, double> Tolerance::resolve(at::ScalarType dtype) const {
  if (rtol && atol) {
    return {*rtol, *atol};
  }
  return default_tolerance(dtype);
}

std::string Tolerance::describe(std::optional<at::ScalarType> dtype) const {
  switch (rule) {
    case Rule::kBitwise:
      return "bitwise";
    case Rule::kUlp:
      return "within " + std::to_string(max_ulp) + " ULP";
    case Rule::kClose:
      break;
  }
  if (!dtype && !rtol) {
    return "torch.testing's rtol/atol for each dtype";
  }
  const auto [r, a] = resolve(dtype.value_or(at::kFloat));
  return "rtol " + format_number(r) + ", atol " + format_number(a);
}

Tolerance tolerance_from_options(bool bitwise, std::optional<int64_t> max_ulp,
                                 std::optional<double> rtol, std::optional<double> atol,
                                 const Tolerance& fallback) {
  std::vector<std::string> given;
  if (bitwise) given.push_back("--bitwise");
  if (max_ulp) given.push_back("--max-ulp");
  if (rtol || atol) given.push_back("--rtol/--atol");
  if (given.size() > 1) {
    throw RunnerError(join(given, " and ") + " each choose the rule; pass only one of them");
  }
  if (rtol.has_value() != atol.has_value()) {
    throw RunnerError(
        "--rtol and --atol go together (as in torch.testing.assert_close): pass both, e.g. "
        "--rtol 1e-4 --atol 1e-5, or neither for torch.testing's defaults for each dtype");
  }
  if (bitwise || (max_ulp && *max_ulp == 0)) {
    return Tolerance{};
  }
  if (max_ulp) {
    return Tolerance{Rule::kUlp, *max_ulp, std::nullopt, std::nullopt};
  }
  if (rtol) {
    return Tolerance{Rule::kClose, 0, rtol, atol};
  }
  return fallback;
}

nlohmann::json tolerance_to_document(const Tolerance& tolerance) {
  const char* names[] = {"bitwise", "ulp", "close"};
  nlohmann::json document = {{"rule", names[static_cast<int>(tolerance.rule)]},
                             {"max_ulp", tolerance.max_ulp},
                             {"rtol", nullptr},
                             {"atol", nullptr}};
  if (tolerance.rtol && tolerance.atol) {
    document["rtol"] = *tolerance.rtol;
    document["atol"] = *tolerance.atol;
  }
  return document;
}

std::string Comparison::line() const {
  if (tolerance.rule == Rule::kBitwise || bits.identical || bits.mismatched()) {
    return bits.detail;
  }
  std::string out = bits.detail + "; " + std::to_string(num_outside) + " of " +
                    std::to_string(bits.numel) + " outside the tolerance";
  if (!first_outside.empty()) {
    out += ", first at " + first_outside;
  }
  return out;
}

Comparison compare(const at::Tensor& actual_in, const at::Tensor& expected_in,
                   const Tolerance& tolerance) {
  Comparison comparison;
  comparison.tolerance = tolerance;
  comparison.dtype = expected_in.scalar_type();
  comparison.bits = compare_bits(actual_in, expected_in);
  if (comparison.bits.identical) {
    return comparison;
  }
  if (comparison.bits.mismatched() || tolerance.rule == Rule::kBitwise) {
    comparison.num_outside = comparison.bits.num_differ;
    return comparison;
  }
  const auto actual_real = as_real(actual_in);
  const auto expected_real = as_real(expected_in);
  const auto actual = actual_real.flatten();
  const auto expected = expected_real.flatten();
  at::Tensor outside;
  if (tolerance.rule == Rule::kUlp) {
    outside = ulp_distance(actual, expected).gt(static_cast<double>(tolerance.max_ulp));
  } else {
    const auto [rtol, atol] = tolerance.resolve(comparison.dtype);
    if (!at::isFloatingType(expected.scalar_type()) && rtol == 0 && atol == 0) {
      outside = actual.ne(expected);  // exactly, past double's 53 bits
    } else {
      outside = at::isclose(actual.to(at::kDouble), expected.to(at::kDouble), rtol, atol,
                            /*equal_nan=*/true)
                    .logical_not();
    }
  }
  comparison.num_outside = outside.sum().item<int64_t>();
  if (comparison.num_outside > 0) {
    int64_t rest = outside.nonzero().flatten()[0].item<int64_t>();
    const int64_t flat = rest;
    std::vector<std::string> index;
    for (int64_t d = expected_real.dim() - 1; d >= 0; --d) {
      index.push_back(std::to_string(rest % expected_real.size(d)));
      rest /= expected_real.size(d);
    }
    std::reverse(index.begin(), index.end());
    // Appended piece by piece: gcc 12 warns (-Wrestrict) on "literal" + std::string&&.
    std::string first = "[";
    first += join(index, ", ");
    first += "]: got " + format_number(actual[flat].to(at::kDouble).item<double>());
    first += ", expected " + format_number(expected[flat].to(at::kDouble).item<double>());
    comparison.first_outside = first;
  }
  return comparison;
}

Verdict list_verdict(const std::vector<Comparison>& comparisons) {
  bool identical = true;
  for (const auto& comparison : comparisons) {
    if (!comparison.passed()) {
      return Verdict::kFailed;
    }
    identical = identical && comparison.bits.identical;
  }
  return identical ? Verdict::kPassed : Verdict::kPassedWithinTolerance;
}

std::string verdict_line(const std::vector<Comparison>& comparisons) {
  const auto verdict = list_verdict(comparisons);
  if (verdict == Verdict::kPassed) {
    return "PASSED (bit-identical)";
  }
  std::set<std::string> rules;
  int64_t numel = 0;
  int64_t differ = 0;
  int64_t outside = 0;
  double max_abs = 0;
  double max_rel = 0;
  double max_ulp = 0;
  std::string reason;
  for (const auto& c : comparisons) {
    rules.insert(c.rule());
    numel += c.bits.numel;
    differ += c.bits.num_differ;
    outside += c.num_outside;
    if (c.bits.identical) {
      continue;
    }
    if (c.bits.mismatched()) {
      reason = reason.empty() ? c.bits.detail : reason;
      continue;
    }
    max_abs = std::max(max_abs, c.bits.max_abs_diff.value_or(0));
    max_rel = std::max(max_rel, c.bits.max_rel_diff.value_or(0));
    max_ulp = std::max(max_ulp, c.bits.max_ulp.value_or(0));
  }
  const auto& tolerance = comparisons.front().tolerance;
  const auto rule = rules.size() == 1 ? *rules.begin() : tolerance.describe();
  const auto stats = !reason.empty() ? reason
                                     : "max abs diff " + format_number(max_abs) +
                                           ", max rel diff " + format_number(max_rel) +
                                           ", max ULP distance " + format_ulp(max_ulp);
  const auto count = tolerance.rule == Rule::kBitwise
                         ? std::to_string(differ) + " of " + std::to_string(numel) +
                               " elements differ"
                         : std::to_string(outside) + " of " + std::to_string(numel) +
                               " elements outside the tolerance";
  if (verdict == Verdict::kPassedWithinTolerance) {
    const std::string within = rule.rfind("within ", 0) == 0 ? rule : std::string("within ") + rule;
    return "PASSED (NOT bit-identical, " + within + ": " + stats + "; " + count + ")";
  }
  return "FAILED (" + rule + ": " + stats + "; " + count + ")";
}

}  // namespace aoti_runner
