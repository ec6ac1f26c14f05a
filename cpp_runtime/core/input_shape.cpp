#include "input_shape.h"

#include "errors.h"

#include <limits>

namespace aoti_runner {
namespace {

constexpr const char* kBlank = " \t";

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(kBlank);
  if (first == std::string::npos) {
    return "";
  }
  return text.substr(first, text.find_last_not_of(kBlank) - first + 1);
}

}  // namespace

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  if (text.find_first_not_of(kBlank) == std::string::npos) {
    return shape;
  }
  const std::string given = "--input-shape '" + text + "': ";
  size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const auto size = trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const bool negative = !size.empty() && size[0] == '-';
    const auto digits = size.substr(!size.empty() && (size[0] == '-' || size[0] == '+') ? 1 : 0);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw RunnerError(given + "expected comma-separated sizes, e.g. 1,3,224,224; " +
                        (size.empty() ? std::string("a size is empty")
                                      : "'" + size + "' is not a whole number (digits only)"));
    }
    const auto significant = digits.find_first_not_of('0');
    const auto magnitude = significant == std::string::npos ? std::string("0") : digits.substr(significant);
    if (negative && magnitude != "0") {
      throw RunnerError(given + "sizes must be >= 0, got " + size);
    }
    const auto largest = std::to_string(std::numeric_limits<int64_t>::max());
    if (magnitude.size() > largest.size() || (magnitude.size() == largest.size() && magnitude > largest)) {
      throw RunnerError(given + "size " + size + " is too large; sizes must be <= " + largest);
    }
    shape.push_back(std::stoll(magnitude));
    if (comma == std::string::npos) {
      return shape;
    }
    start = comma + 1;
  }
}

}  // namespace aoti_runner
