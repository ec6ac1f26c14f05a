#include "comparison.h"

#include "dtypes.h"
#include "text.h"
#include "validation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace aoti_runner {
namespace {

std::string hex_bits(const at::Tensor& int_scalar, int64_t width_bytes) {
  const auto value = static_cast<uint64_t>(int_scalar.item<int64_t>());
  const uint64_t mask = width_bytes >= 8 ? ~0ULL : ((1ULL << (width_bytes * 8)) - 1);
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(static_cast<int>(width_bytes * 2))
      << std::setfill('0') << (value & mask);
  return out.str();
}

at::ScalarType int_of_width(size_t width) {
  return width == 1 ? at::kByte : width == 2 ? at::kShort : width == 4 ? at::kInt : at::kLong;
}

}  // namespace

std::string format_ulp(double value) {
  if (std::isinf(value)) {
    return "inf";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << value;
  return out.str();
}

std::string format_number(double value) {
  if (std::isnan(value)) {
    return "nan";  // whatever the sign bit: Python prints "nan" too
  }
  std::ostringstream out;
  out << std::setprecision(9) << value;
  return out.str();
}

at::Tensor as_real(const at::Tensor& tensor) {
  const auto resolved = tensor.cpu().resolve_conj().resolve_neg().contiguous();
  return resolved.is_complex() ? at::view_as_real(resolved) : resolved;
}

// Floats are mapped to integers ordered like the values (-0.0 and +0.0 both to 0), so
// the distance counts the representable values between them; complex tensors count
// their real and imaginary parts apart; integers get |a - e|, taken in int64.
at::Tensor ulp_distance(const at::Tensor& actual_in, const at::Tensor& expected_in) {
  const auto actual = as_real(actual_in);
  const auto expected = as_real(expected_in);
  if (!at::isFloatingType(expected.scalar_type())) {
    return (actual.to(at::kLong) - expected.to(at::kLong)).abs().flatten().to(at::kDouble);
  }
  const int64_t width_bits = 8 * static_cast<int64_t>(expected.element_size());
  // 1-byte floats are viewed as signed bytes, so the sign bit extends.
  const auto int_dtype =
      expected.element_size() == 1 ? at::kChar : int_of_width(expected.element_size());
  const int64_t sign_mask = static_cast<int64_t>((uint64_t{1} << (width_bits - 1)) - 1);
  const auto ordered = [&](const at::Tensor& t) {
    const auto bits = t.view(int_dtype).flatten().to(at::kLong);  // sign-extends
    const auto magnitude = bits.bitwise_and(sign_mask);
    return at::where(bits.lt(0), magnitude.neg(), magnitude);
  };
  const auto a = ordered(actual);
  const auto e = ordered(expected);
  const auto same_sign = a.ge(0).eq(e.ge(0));
  // Opposite signs: |a| + |e| can overflow int64 for float64, so add in double.
  auto distance = at::where(same_sign, (a - e).abs().to(at::kDouble),
                            a.abs().to(at::kDouble) + e.abs().to(at::kDouble));
  const auto a_nan = actual.flatten().isnan();
  const auto e_nan = expected.flatten().isnan();
  distance = at::where(a_nan.logical_and(e_nan), at::zeros_like(distance), distance);
  return at::where(a_nan.logical_xor(e_nan), at::full_like(distance, INFINITY), distance);
}

BitReport compare_bits(const at::Tensor& actual_in, const at::Tensor& expected_in) {
  BitReport report;
  report.numel = expected_in.numel();
  if (actual_in.scalar_type() != expected_in.scalar_type()) {
    report.num_differ = report.numel;
    report.detail = "dtype differs: got " + dtype_name(actual_in.scalar_type()) + ", expected " +
                    dtype_name(expected_in.scalar_type());
    return report;
  }
  // Complex numbers are compared as their real and imaginary parts.
  const auto actual = as_real(actual_in);
  const auto expected = as_real(expected_in);
  if (actual_in.sizes() != expected_in.sizes()) {
    report.num_differ = report.numel;
    report.detail = "shape differs: got " + format_sizes(actual_in) + ", expected " +
                    format_sizes(expected_in);
    return report;
  }
  report.numel = expected.numel();
  const auto width = static_cast<int64_t>(actual.element_size());
  const auto int_dtype = int_of_width(actual.element_size());
  const auto actual_bits = actual.view(int_dtype).flatten();
  const auto expected_bits = expected.view(int_dtype).flatten();
  const auto differ = actual_bits.ne(expected_bits);
  report.num_differ = differ.sum().item<int64_t>();
  report.identical = report.num_differ == 0;
  if (report.identical) {
    report.detail = "identical";
    return report;
  }
  const int64_t flat = differ.nonzero().flatten()[0].item<int64_t>();
  std::vector<std::string> index;
  int64_t rest = flat;
  for (int64_t d = actual.dim() - 1; d >= 0; --d) {
    index.push_back(std::to_string(rest % actual.size(d)));
    rest /= actual.size(d);
  }
  std::reverse(index.begin(), index.end());
  const auto a = actual.flatten()[flat].to(at::kDouble).item<double>();
  const auto e = expected.flatten()[flat].to(at::kDouble).item<double>();
  const auto a64 = actual.to(at::kDouble).flatten();
  const auto e64 = expected.to(at::kDouble).flatten();
  const auto both_finite = a64.isfinite().logical_and(e64.isfinite());
  const auto abs_diff = at::where(both_finite, (a64 - e64).abs(), at::zeros_like(a64));
  const double max_abs = abs_diff.max().item<double>();
  const auto relative = both_finite.logical_and(e64.ne(0));
  const double max_rel =
      at::where(relative, abs_diff / e64.abs().clamp_min(std::numeric_limits<double>::min()),
                at::zeros_like(a64))
          .max()
          .item<double>();
  report.max_ulp = ulp_distance(actual, expected).max().item<double>();
  report.max_abs_diff = max_abs;
  report.max_rel_diff = max_rel;
  std::ostringstream out;
  out << report.num_differ << " of " << report.numel << " elements differ; first at ["
      << join(index, ", ") << "]: got " << format_number(a) << " ("
      << hex_bits(actual_bits[flat], width) << "), expected " << format_number(e) << " ("
      << hex_bits(expected_bits[flat], width) << "); max abs diff " << format_number(max_abs)
      << ", max rel diff " << format_number(max_rel) << ", max ULP distance "
      << format_ulp(*report.max_ulp);
  report.detail = out.str();
  return report;
}

}  // namespace aoti_runner
