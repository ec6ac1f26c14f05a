#include "dtypes.h"

namespace aoti_runner {
namespace {

struct Entry {
  const char* name;  // Python's spelling
  c10::ScalarType dtype;
  const char* triton;  // Triton's data type (config.pbtxt: TYPE_ + it); nullptr: none
};

// Triton has no complex or float8 type: such tensors cannot be served.
const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {"bool", c10::kBool, "BOOL"},
      {"uint8", c10::kByte, "UINT8"},
      {"int8", c10::kChar, "INT8"},
      {"int16", c10::kShort, "INT16"},
      {"int32", c10::kInt, "INT32"},
      {"int64", c10::kLong, "INT64"},
      {"uint16", c10::kUInt16, "UINT16"},
      {"uint32", c10::kUInt32, "UINT32"},
      {"uint64", c10::kUInt64, "UINT64"},
      {"float16", c10::kHalf, "FP16"},
      {"bfloat16", c10::kBFloat16, "BF16"},
      {"float32", c10::kFloat, "FP32"},
      {"float64", c10::kDouble, "FP64"},
      {"complex32", c10::kComplexHalf, nullptr},
      {"complex64", c10::kComplexFloat, nullptr},
      {"complex128", c10::kComplexDouble, nullptr},
      {"float8_e4m3fn", c10::kFloat8_e4m3fn, nullptr},
      {"float8_e5m2", c10::kFloat8_e5m2, nullptr},
      {"float8_e4m3fnuz", c10::kFloat8_e4m3fnuz, nullptr},
      {"float8_e5m2fnuz", c10::kFloat8_e5m2fnuz, nullptr},
  };
  return entries;
}

// The first entry that `matches`, or nullptr.
template <typename Match>
const Entry* find_entry(Match matches) {
  for (const auto& entry : table()) {
    if (matches(entry)) {
      return &entry;
    }
  }
  return nullptr;
}

// The names of the entries that `match`, in table order.
template <typename Match>
std::vector<std::string> names_of(Match matches) {
  std::vector<std::string> names;
  for (const auto& entry : table()) {
    if (matches(entry)) {
      names.push_back(entry.name);
    }
  }
  return names;
}

}  // namespace

std::optional<c10::ScalarType> dtype_from_name(const std::string& name) {
  const auto* entry = find_entry([&](const Entry& e) { return e.name == name; });
  return entry ? std::optional(entry->dtype) : std::nullopt;
}

std::string dtype_name(c10::ScalarType dtype) {
  const auto* entry = find_entry([&](const Entry& e) { return e.dtype == dtype; });
  return entry ? entry->name : c10::toString(dtype);
}

bool is_export_dtype(const std::string& name) {
  return name == "float16" || name == "bfloat16" || name == "float32" || name == "float64";
}

bool is_integer_dtype(const std::string& name) {
  const auto dtype = dtype_from_name(name);
  return dtype && c10::isIntegralType(*dtype, /*includeBool=*/true);
}

std::vector<std::string> dtype_names() {
  return names_of([](const Entry&) { return true; });
}

std::optional<std::string> triton_type(const std::string& name) {
  const auto* entry = find_entry([&](const Entry& e) { return e.name == name; });
  return entry && entry->triton ? std::optional<std::string>(entry->triton) : std::nullopt;
}

std::optional<std::string> dtype_of_triton_type(const std::string& triton) {
  const auto* entry = find_entry([&](const Entry& e) { return e.triton && triton == e.triton; });
  return entry ? std::optional<std::string>(entry->name) : std::nullopt;
}

std::vector<std::string> triton_servable_names() {
  return names_of([](const Entry& e) { return e.triton != nullptr; });
}

}  // namespace aoti_runner
