#include "dtypes.h"

#include <utility>

namespace aoti_runner {
namespace {

const std::vector<std::pair<std::string, c10::ScalarType>>& table() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> entries = {
      {"bool", c10::kBool},
      {"uint8", c10::kByte},
      {"int8", c10::kChar},
      {"int16", c10::kShort},
      {"int32", c10::kInt},
      {"int64", c10::kLong},
      {"uint16", c10::kUInt16},
      {"uint32", c10::kUInt32},
      {"uint64", c10::kUInt64},
      {"float16", c10::kHalf},
      {"bfloat16", c10::kBFloat16},
      {"float32", c10::kFloat},
      {"float64", c10::kDouble},
      {"complex32", c10::kComplexHalf},
      {"complex64", c10::kComplexFloat},
      {"complex128", c10::kComplexDouble},
      {"float8_e4m3fn", c10::kFloat8_e4m3fn},
      {"float8_e5m2", c10::kFloat8_e5m2},
      {"float8_e4m3fnuz", c10::kFloat8_e4m3fnuz},
      {"float8_e5m2fnuz", c10::kFloat8_e5m2fnuz},
  };
  return entries;
}

}  // namespace

std::optional<c10::ScalarType> dtype_from_name(const std::string& name) {
  for (const auto& [entry_name, dtype] : table()) {
    if (entry_name == name) {
      return dtype;
    }
  }
  return std::nullopt;
}

std::string dtype_name(c10::ScalarType dtype) {
  for (const auto& [name, entry_dtype] : table()) {
    if (entry_dtype == dtype) {
      return name;
    }
  }
  return c10::toString(dtype);
}

bool is_export_dtype(const std::string& name) {
  return name == "float16" || name == "bfloat16" || name == "float32" || name == "float64";
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& entry : table()) {
    names.push_back(entry.first);
  }
  return names;
}

}  // namespace aoti_runner
