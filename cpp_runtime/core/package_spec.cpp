#include "package_spec.h"

#include "dtypes.h"
#include "errors.h"
#include "json_text.h"
#include "text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace aoti_runner {
namespace {

using nlohmann::json;

const char* const kReexport = "Re-export the package with export_compile.";

RunnerError malformed(const std::string& detail) {
  return RunnerError("package metadata is malformed: " + detail + ". " + kReexport, "malformed");
}

std::string type_name(const json& value) {
  if (value.is_object()) return "object";
  if (value.is_array()) return "array";
  if (value.is_string()) return "string";
  if (value.is_boolean()) return "boolean";
  if (value.is_null()) return "null";
  return "number";
}

int64_t get_int(const json& value, const std::string& where, int64_t low = 0) {
  // JSON integers only (not 1.0, not true), within [low, int64 max].
  bool ok = false;
  int64_t result = 0;
  if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    result = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    result = value.get<int64_t>();
    ok = true;
  }
  if (!ok || result < low) {
    throw malformed(where + ": expected an integer >= " + std::to_string(low) + ", got " +
                    brief_json(value));
  }
  return result;
}

std::string get_string(const json& value, const std::string& where) {
  if (!value.is_string()) {
    throw malformed(where + ": expected a string, got " + type_name(value));
  }
  return value.get<std::string>();
}

const json& get_array(const json& value, const std::string& where) {
  if (!value.is_array()) {
    throw malformed(where + ": expected an array, got " + type_name(value));
  }
  return value;
}

std::string get_qualified(const json& value, const std::string& where) {
  const auto name = get_string(value, where);
  const auto sep = name.find("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= name.size()) {
    throw malformed(where + ": expected a qualified name 'namespace::name', got " +
                    brief_json(name));
  }
  return name;
}

bool is_int64(const json& value) {
  return value.is_number_integer() &&
         (!value.is_number_unsigned() ||
          value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

// tuning (an export with optimize="tune"): an array of {"name": string,
// "inductor_configs": object, "p50_us": a number >= 0 or null, "result": string}.
// The runners ignore its rows (--inspect shows them), but refuse a malformed one and
// write the rest back with these four keys, as Python does.
json get_tuning(const json& value);

// inductor_configs: an object of non-empty keys whose values are booleans, 64-bit
// integers or strings; kept as each value's JSON text, for --inspect.
std::map<std::string, std::string> get_inductor_configs(const json& value) {
  if (!value.is_object()) {
    throw malformed("inductor_configs: expected an object, got " + type_name(value));
  }
  std::map<std::string, std::string> configs;
  for (const auto& [key, setting] : value.items()) {
    if (key.empty()) {
      throw malformed("inductor_configs: a key is empty");
    }
    if (!setting.is_boolean() && !setting.is_string() && !is_int64(setting)) {
      throw malformed("inductor_configs." + key + ": expected a boolean, integer or string, got " +
                      brief_json(setting));
    }
    configs[key] = setting.dump();
  }
  return configs;
}

json get_tuning(const json& value) {
  get_array(value, "tuning");
  json rows = json::array();
  for (size_t i = 0; i < value.size(); ++i) {
    const auto& row = value[i];
    const auto where = "tuning[" + std::to_string(i) + "]";
    if (!row.is_object()) {
      throw malformed(where + ": expected an object, got " + type_name(row));
    }
    const auto p50 = row.value("p50_us", json(nullptr));
    if (!p50.is_null() && (!p50.is_number() || !std::isfinite(p50.get<double>()) || p50.get<double>() < 0)) {
      throw malformed(where + ".p50_us: expected a finite number >= 0 or null, got " + brief_json(p50));
    }
    const auto name = get_string(row.value("name", json(nullptr)), where + ".name");
    const auto configs = row.value("inductor_configs", json::object());
    get_inductor_configs(configs);
    const auto result = get_string(row.value("result", json(nullptr)), where + ".result");
    rows.push_back({{"name", name}, {"inductor_configs", configs}, {"p50_us", p50}, {"result", result}});
  }
  return rows;
}

// constant_inputs: objects with a string name, an integer index >= 0 and a scalar
// value (number, boolean, string or null).
json get_constant_inputs(const json& value) {
  get_array(value, "constant_inputs");
  json constants = json::array();
  for (size_t k = 0; k < value.size(); ++k) {
    const std::string where = "constant_inputs[" + std::to_string(k) + "]";
    const auto& item = value[k];
    if (!item.is_object()) {
      throw malformed(where + ": expected an object, got " + type_name(item));
    }
    const auto it = item.find("value");
    const json scalar = it == item.end() ? json(nullptr) : *it;
    if (scalar.is_object() || scalar.is_array()) {
      throw malformed(where + ".value: expected a number, boolean, string or null, got " + type_name(scalar));
    }
    const auto name = get_string(item.contains("name") ? item.at("name") : json(nullptr), where + ".name");
    const auto index = get_int(item.contains("index") ? item.at("index") : json(nullptr), where + ".index");
    constants.push_back({{"name", name}, {"index", index}, {"value", scalar}});
  }
  return constants;
}

// A member of an object, or null when absent (so each getter names what it wanted).
const json& member(const json& object, const std::string& key) {
  static const json null_value;
  const auto it = object.find(key);
  return it == object.end() ? null_value : *it;
}

// quantization (an int8 export): {"mode": "int8" or "int8-dynamic", the integers >= 0
// below, "max_abs": a finite number >= 0, "top1_agreement": a number in 0..1 or null};
// {} (or absent) for none. Checked in spec_fields.quantization_of's order, with its
// words, and written back with these keys only, as Python does.
const char* const kQuantizationCounts[] = {"calibration_calls", "convolutions",     "linears",
                                           "fp32_heavy",        "int8_convolutions", "int8_linears"};

json get_quantization(const json& value) {
  if (!value.is_object()) {
    throw malformed("quantization: expected an object, got " + type_name(value));
  }
  if (value.empty()) {
    return json::object();
  }
  const auto mode = get_string(member(value, "mode"), "quantization.mode");
  if (mode != "int8" && mode != "int8-dynamic") {
    throw malformed("quantization.mode: expected one of int8, int8-dynamic, got " + brief_json(mode));
  }
  json record = {{"mode", mode}};
  for (const char* key : kQuantizationCounts) {
    record[key] = get_int(member(value, key), std::string("quantization.").append(key));
  }
  const auto& max_abs = member(value, "max_abs");
  if (!max_abs.is_number() || !std::isfinite(max_abs.get<double>()) || max_abs.get<double>() < 0) {
    throw malformed("quantization.max_abs: expected a finite number >= 0, got " + brief_json(max_abs));
  }
  const auto& top1 = member(value, "top1_agreement");
  if (!top1.is_null() && (!top1.is_number() || !(top1.get<double>() >= 0 && top1.get<double>() <= 1))) {
    throw malformed("quantization.top1_agreement: expected a number in 0..1 or null, got " + brief_json(top1));
  }
  record["max_abs"] = max_abs;
  record["top1_agreement"] = top1;
  return record;
}

// The record in one line, for --inspect: spec_fields.describe_quantization's words,
// its numbers formatted as Python's ":.3g" and ":.1f" format them.
std::string describe_quantization(const json& record) {
  const auto count = [&](const char* key) { return record.at(key).get<int64_t>(); };
  const auto text = [](const char* format, double number) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, format, number);
    return std::string(buffer);
  };
  const auto mode = record.at("mode").get<std::string>();
  std::string out(mode);
  out.append(" (")
      .append(mode == "int8-dynamic" ? "dynamic" : "static")
      .append(", ")
      .append(std::to_string(count("calibration_calls")))
      .append(" calibration call(s)): ")
      .append(std::to_string(count("int8_convolutions")))
      .append(" of ")
      .append(std::to_string(count("convolutions")))
      .append(" quantized convolution(s) and ")
      .append(std::to_string(count("int8_linears")))
      .append(" of ")
      .append(std::to_string(count("linears")))
      .append(" linear(s) run oneDNN int8 kernels");
  // Both counts are >= 0, so the difference fits an int64.
  if (const auto small = count("linears") - count("int8_linears"); small > 0) {
    out.append(" (")
        .append(std::to_string(small))
        .append(" small linear(s) in Inductor's own kernels, from the int8 weights)");
  }
  out.append("; against the fp32 model: max abs ").append(text("%.3g", record.at("max_abs").get<double>()));
  if (const auto& top1 = record.at("top1_agreement"); !top1.is_null()) {
    out.append(", top-1 agreement ").append(text("%.1f", 100 * top1.get<double>())).append(" %");
  }
  return out;
}

Tolerance get_tolerance(const json& value, const std::string& where) {
  if (!value.is_object()) {
    throw malformed(where + ": expected an object, got " + type_name(value));
  }
  Tolerance tolerance;
  const auto& rule = member(value, "rule");
  if (rule == "bitwise") {
    tolerance.rule = Rule::kBitwise;
  } else if (rule == "ulp") {
    tolerance.rule = Rule::kUlp;
  } else if (rule == "close") {
    tolerance.rule = Rule::kClose;
  } else {
    throw malformed(where + ".rule: expected one of bitwise, ulp, close, got " + brief_json(rule));
  }
  const auto max_ulp =
      get_int(value.contains("max_ulp") ? value.at("max_ulp") : json(0), where + ".max_ulp");
  std::optional<double> bounds[2];
  const char* keys[] = {"rtol", "atol"};
  for (int k = 0; k < 2; ++k) {
    const auto& bound = member(value, keys[k]);
    if (bound.is_null()) {
      continue;
    }
    if (!bound.is_number() || !std::isfinite(bound.get<double>()) || bound.get<double>() < 0) {
      throw malformed(where + "." + keys[k] + ": expected a finite number >= 0 or null, got " +
                      brief_json(bound));
    }
    bounds[k] = bound.get<double>();
  }
  if (bounds[0].has_value() != bounds[1].has_value()) {
    throw malformed(where + ": rtol and atol are both numbers or both null");
  }
  if (tolerance.rule == Rule::kUlp) {
    if (max_ulp == 0) {
      throw malformed(where + ": the ulp rule needs max_ulp >= 1 (0 is the bitwise rule)");
    }
    tolerance.max_ulp = max_ulp;
  }
  if (tolerance.rule == Rule::kClose) {
    tolerance.rtol = bounds[0];
    tolerance.atol = bounds[1];
  }
  return tolerance;
}

// An input's "values" entry: integers min <= max that the input's (integer) dtype
// holds, and a string "why".
ValueRange get_value_range(const json& value, const std::string& dtype, const std::string& where) {
  static const std::map<std::string, std::pair<int64_t, int64_t>> kHeld = {
      {"uint8", {0, 255}},
      {"int8", {-128, 127}},
      {"int16", {-32768, 32767}},
      {"int32", {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}},
      {"int64", {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}},
  };
  if (!value.is_object()) {
    throw malformed(where + ": expected an object, got " + type_name(value));
  }
  const auto held = kHeld.find(dtype);
  if (held == kHeld.end()) {
    throw malformed(where + ": a value range applies to an integer input (uint8, int8, int16, int32, int64), got " +
                    dtype);
  }
  ValueRange range;
  const char* keys[] = {"min", "max"};
  int64_t* bounds[] = {&range.min, &range.max};
  for (int k = 0; k < 2; ++k) {
    const auto& bound = member(value, keys[k]);
    const bool fits = bound.is_number_integer() &&
                      (!bound.is_number_unsigned() ||
                       bound.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!fits) {
      throw malformed(where + "." + keys[k] + ": expected a 64-bit integer, got " + brief_json(bound));
    }
    *bounds[k] = bound.get<int64_t>();
  }
  const auto range_text = std::to_string(range.min) + ".." + std::to_string(range.max);
  if (range.min > range.max) {
    throw malformed(where + ": the range " + range_text + " is empty");
  }
  if (range.min < held->second.first || range.max > held->second.second) {
    throw malformed(where + ": the range " + range_text + " does not fit " + dtype);
  }
  const auto& why = member(value, "why");
  range.why = why.is_null() ? std::string() : get_string(why, where + ".why");
  return range;
}

// A tensor's "name": a string of [A-Za-z_][A-Za-z0-9_.]*, of kTensorNameLimit
// characters at most.
std::string get_tensor_name(const json& value, const std::string& where) {
  const auto name = get_string(value, where);
  const auto word = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
  };
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  const bool ok = !name.empty() && word(name[0]) &&
                  std::all_of(name.begin(), name.end(), [&](char c) { return word(c) || digit(c) || c == '.'; });
  // The characters first: then every name measured is ASCII, one byte per character
  // here as in Python.
  if (!ok) {
    throw malformed(where + ": expected a name of ASCII letters, digits, '_' and '.' that does not start with a "
                    "digit or '.', got " + brief_json(name));
  }
  if (name.size() > kTensorNameLimit) {
    throw malformed(where + ": a name has at most " + std::to_string(kTensorNameLimit) + " characters, got " +
                    std::to_string(name.size()));
  }
  return name;
}

// An output's "kind": one of tensor, int, float, bool; a scalar's entry is 0-d, of its
// kind's dtype. Inputs have none: a package takes tensors only.
std::string get_kind(const json& value, const std::string& key, const std::string& where, const TensorSpec& tensor) {
  if (key != "outputs") {
    throw malformed(where + ".kind: only an output has a kind (a package takes tensors only)");
  }
  const bool known = value.is_string() && (value.get<std::string>() == kTensorKind ||
                                           scalar_dtype_of_kind(value.get<std::string>()));
  if (!known) {
    throw malformed(where + ".kind: expected one of tensor, int, float, bool, got " + brief_json(value));
  }
  const auto kind = value.get<std::string>();
  const auto dtype = scalar_dtype_of_kind(kind);
  if (dtype && (!tensor.dims.empty() || tensor.dtype != *dtype)) {
    throw malformed(where + ": kind \"" + kind + "\" is a 0-d " + *dtype + " tensor, got " + format_shape(tensor) +
                    " " + tensor.dtype);
  }
  return kind;
}

// Names on every entry of `key` or on none, and no name twice.
void check_names(const std::vector<TensorSpec>& specs, const std::string& key) {
  const auto named = std::find_if(specs.begin(), specs.end(), [](const TensorSpec& t) { return !t.name.empty(); });
  const auto unnamed = std::find_if(specs.begin(), specs.end(), [](const TensorSpec& t) { return t.name.empty(); });
  if (named != specs.end() && unnamed != specs.end()) {
    throw malformed(key + "[" + std::to_string(unnamed - specs.begin()) + "]: has no name, but " + key + "[" +
                    std::to_string(named - specs.begin()) + "] has one (name every entry or none)");
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name.empty()) {
      continue;
    }
    if (const auto it = seen.find(specs[i].name); it != seen.end()) {
      throw malformed(key + "[" + std::to_string(i) + "].name: " + brief_json(specs[i].name) + " is also " + key +
                      "[" + std::to_string(it->second) + "]'s name");
    }
    seen[specs[i].name] = i;
  }
}

// The "inputs" or "outputs" entry (key): one object per tensor, with a known dtype and
// dims of non-empty [min, max] ranges. "max": null (schema 3) is unbounded, and so is
// int64's largest value: what version-2 writers recorded for torch.export's int_oo.
std::vector<TensorSpec> get_tensor_specs(const json& value, const std::string& key, int64_t version) {
  std::vector<TensorSpec> specs;
  const auto& items = get_array(value, key);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto where = key + "[" + std::to_string(i) + "]";
    const auto& item = items[i];
    if (!item.is_object()) {
      throw malformed(where + ": expected an object, got " + type_name(item));
    }
    TensorSpec tensor;
    tensor.dtype = get_string(member(item, "dtype"), where + ".dtype");
    if (!dtype_from_name(tensor.dtype)) {
      throw malformed(where + ".dtype: unknown dtype " + brief_json(tensor.dtype));
    }
    const auto& dims = get_array(member(item, "dims"), where + ".dims");
    for (size_t d = 0; d < dims.size(); ++d) {
      const auto dim_where = where + ".dims[" + std::to_string(d) + "]";
      if (!dims[d].is_object()) {
        throw malformed(dim_where + ": expected an object, got " + type_name(dims[d]));
      }
      DimSpec dim;
      dim.min = get_int(member(dims[d], "min"), dim_where + ".min");
      const auto& max = member(dims[d], "max");
      if (max.is_null() && dims[d].contains("max")) {
        if (version < kUnboundedSchemaVersion) {
          throw malformed(dim_where + ".max: null (unbounded) needs schema_version " +
                          std::to_string(kUnboundedSchemaVersion) + ", but the spec is version " +
                          std::to_string(version));
        }
        dim.max = std::nullopt;
      } else {
        dim.max = get_int(max, dim_where + ".max");
        if (*dim.max == std::numeric_limits<int64_t>::max()) {
          dim.max = std::nullopt;
        }
      }
      if (dim.max && dim.min > *dim.max) {
        throw malformed(dim_where + ": the range " + std::to_string(dim.min) + ".." +
                        std::to_string(*dim.max) + " is empty");
      }
      tensor.dims.push_back(dim);
    }
    if (const auto& values = member(item, "values"); !values.is_null()) {
      tensor.values = get_value_range(values, tensor.dtype, where + ".values");
    }
    if (item.contains("name")) {
      tensor.name = get_tensor_name(item.at("name"), where + ".name");
    }
    if (item.contains("kind")) {
      tensor.kind = get_kind(item.at("kind"), key, where, tensor);
    }
    specs.push_back(tensor);
  }
  check_names(specs, key);
  return specs;
}

// An "inputs" or "outputs" entry, as get_tensor_specs reads it.
json tensor_specs_document(const std::vector<TensorSpec>& specs) {
  json items = json::array();
  for (const auto& spec : specs) {
    json dims = json::array();
    for (const auto& d : spec.dims) {
      dims.push_back({{"min", d.min}, {"max", d.max ? json(*d.max) : json(nullptr)}});
    }
    json item = {{"dtype", spec.dtype}, {"dims", dims}};
    if (spec.values) {  // written only when recorded, as in Python
      item["values"] = {{"min", spec.values->min}, {"max", spec.values->max}, {"why", spec.values->why}};
    }
    if (!spec.name.empty()) {  // written only when recorded, as in Python
      item["name"] = spec.name;
    }
    if (spec.is_scalar()) {  // written only for a scalar, as in Python
      item["kind"] = spec.kind;
    }
    items.push_back(item);
  }
  return items;
}

}  // namespace

std::string ValueRange::str() const {
  // Appended, as in format_shape: gcc 12 warns (-Wrestrict) on const char* + std::string&&.
  std::string out("[");
  out.append(std::to_string(min)).append(", ").append(std::to_string(max)).append("]");
  return out;
}

std::string OpRef::str() const {
  return !overload || *overload == "default" ? name : name + "." + *overload;
}

std::string DimSpec::str() const {
  if (is_static()) {
    return std::to_string(min);
  }
  return std::to_string(min) + ".." + (max ? std::to_string(*max) : std::string("unbounded"));
}

std::string DimSpec::wanted() const {
  if (is_static()) {
    return std::to_string(min);
  }
  // Appended, not "text" + std::to_string(...): see format_shape.
  if (!max) {
    return std::string("a size >= ").append(std::to_string(min));
  }
  return std::string("a size in [").append(std::to_string(min)).append(", ").append(std::to_string(*max)).append("]");
}

std::string format_shape(const TensorSpec& spec) {
  std::vector<std::string> dims;
  for (const auto& d : spec.dims) {
    dims.push_back(d.str());
  }
  // Appended, not "[" + join(...): gcc 12 warns (-Wrestrict, a false positive) on
  // const char* + std::string&&, and the CUDA check builds with warnings as errors.
  std::string out("[");
  out.append(join(dims, ", ")).append("]");
  return out;
}

std::optional<std::string> scalar_dtype_of_kind(const std::string& kind) {
  if (kind == "int") return std::string("int64");
  if (kind == "float") return std::string("float64");
  if (kind == "bool") return std::string("bool");
  return std::nullopt;
}

std::string describe_tensor(const TensorSpec& spec) {
  if (spec.is_scalar()) {
    return spec.kind + " (a 0-d " + spec.dtype + " tensor)";
  }
  return format_shape(spec) + " " + spec.dtype;
}

std::string tensor_label(const std::string& role, size_t index, const std::vector<TensorSpec>& specs) {
  auto label = role + "[" + std::to_string(index) + "]";
  if (index < specs.size() && !specs[index].name.empty()) {
    label.append(" (").append(specs[index].name).append(")");
  }
  return label;
}

std::vector<std::string> tensor_names(const std::vector<TensorSpec>& specs) {
  std::vector<std::string> names;
  if (!specs.empty() && !specs.front().name.empty()) {
    for (const auto& spec : specs) {
      names.push_back(spec.name);
    }
  }
  return names;
}

std::vector<std::string> named_outputs(const PackageSpec& spec, size_t count) {
  return spec.outputs_by_name && count == spec.outputs.size() ? tensor_names(spec.outputs)
                                                              : std::vector<std::string>{};
}

PackageSpec parse_spec_document(const json& document) {
  if (!document.is_object()) {
    throw malformed("the spec must be a JSON object, got " + type_name(document));
  }
  PackageSpec spec;
  const auto version = get_int(member(document, "schema_version"), "schema_version", 1);
  if (version > kSchemaVersion) {
    throw RunnerError("the package spec has schema version " + std::to_string(version) +
                          ", but this runner reads versions up to " +
                          std::to_string(kSchemaVersion) +
                          ". Upgrade the runner, or re-export the package with this toolkit.",
                      "unsupported_version");
  }
  spec.schema_version = static_cast<int>(version);
  if (!document.contains("inputs")) {
    throw malformed("the spec has no 'inputs'");
  }
  const auto get = [&](const std::string& key, const json& fallback) -> json {
    return document.contains(key) ? document.at(key) : fallback;
  };

  spec.inputs = get_tensor_specs(document.at("inputs"), "inputs", version);
  spec.outputs = get_tensor_specs(get("outputs", json::array()), "outputs", version);

  const auto shapes = get("example_shapes", json::array());
  get_array(shapes, "example_shapes");
  if (!shapes.empty() && shapes.size() != spec.inputs.size()) {
    throw malformed("example_shapes: " + std::to_string(shapes.size()) + " shape(s) for " +
                    std::to_string(spec.inputs.size()) + " input(s)");
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto where = "example_shapes[" + std::to_string(i) + "]";
    std::vector<int64_t> shape;
    const auto& sizes = get_array(shapes[i], where);
    for (size_t d = 0; d < sizes.size(); ++d) {
      shape.push_back(get_int(sizes[d], where + "[" + std::to_string(d) + "]"));
    }
    const auto& dims = spec.inputs[i].dims;
    bool fits = shape.size() == dims.size();
    for (size_t d = 0; fits && d < dims.size(); ++d) {
      fits = dims[d].contains(shape[d]);
    }
    if (!fits) {
      std::vector<std::string> parts;
      for (const auto s : shape) parts.push_back(std::to_string(s));
      throw malformed(where + ": [" + join(parts, ", ") + "] does not fit input " +
                      std::to_string(i) + "'s " + format_shape(spec.inputs[i]));
    }
    spec.example_shapes.push_back(shape);
  }

  const auto groups = get("shared_dims", json::array());
  get_array(groups, "shared_dims");
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto group_where = "shared_dims[" + std::to_string(g) + "]";
    const auto& positions = get_array(groups[g], group_where);
    std::vector<std::pair<int64_t, int64_t>> group;
    for (size_t p = 0; p < positions.size(); ++p) {
      const auto where = group_where + "[" + std::to_string(p) + "]";
      const auto& pair = get_array(positions[p], where);
      if (pair.size() != 2) {
        throw malformed(where + ": expected [input, dim], got " + brief_json(pair));
      }
      const auto i = get_int(pair[0], where + "[0]");
      const auto d = get_int(pair[1], where + "[1]");
      if (static_cast<size_t>(i) >= spec.inputs.size() ||
          static_cast<size_t>(d) >= spec.inputs[static_cast<size_t>(i)].dims.size()) {
        throw malformed(where + ": input " + std::to_string(i) + " dim " + std::to_string(d) +
                        " is not an input dim");
      }
      group.emplace_back(i, d);
    }
    if (group.size() < 2) {
      throw malformed(group_where + ": a group needs two or more positions, got " +
                      std::to_string(group.size()));
    }
    spec.shared_dims.push_back(group);
  }

  const auto ops = get("required_ops", json::array());
  get_array(ops, "required_ops");
  for (size_t k = 0; k < ops.size(); ++k) {
    const auto where = "required_ops[" + std::to_string(k) + "]";
    if (!ops[k].is_object()) {
      throw malformed(where + ": expected an object, got " + type_name(ops[k]));
    }
    OpRef op;
    op.name = get_qualified(member(ops[k], "name"), where + ".name");
    const auto& overload = member(ops[k], "overload");
    if (!overload.is_null()) {
      op.overload = get_string(overload, where + ".overload");
    }
    spec.required_ops.push_back(op);
  }

  const auto strings = [&](const std::string& key, bool qualified) {
    std::vector<std::string> values;
    const auto list = get(key, json::array());
    get_array(list, key);
    for (size_t k = 0; k < list.size(); ++k) {
      const auto where = key + "[" + std::to_string(k) + "]";
      values.push_back(qualified ? get_qualified(list[k], where) : get_string(list[k], where));
    }
    return values;
  };
  spec.required_classes = strings("required_classes", true);
  spec.op_libraries = strings("op_libraries", false);
  const auto namespaces = get("op_library_namespaces", json::object());
  if (!namespaces.is_object()) {
    throw malformed("op_library_namespaces: expected an object, got " + type_name(namespaces));
  }
  for (const auto& [library, names] : namespaces.items()) {
    const auto where = "op_library_namespaces." + library;
    auto& parsed = spec.op_library_namespaces[library];
    const auto& list = get_array(names, where);
    for (size_t k = 0; k < list.size(); ++k) {
      parsed.push_back(get_string(list[k], where + "[" + std::to_string(k) + "]"));
    }
  }
  spec.cpu_flags = strings("cpu_flags", false);
  spec.cpu_target = get_string(get("cpu_target", ""), "cpu_target");
  if (document.contains("intra_op_threads")) {
    spec.intra_op_threads = get_int(document.at("intra_op_threads"), "intra_op_threads", 1);
  }
  spec.python_only_ops = strings("python_only_ops", true);
  spec.fake_modules = strings("fake_modules", false);

  const auto is_identity = get("is_identity", false);
  if (!is_identity.is_boolean()) {
    throw malformed("is_identity: expected a boolean, got " + type_name(is_identity));
  }
  spec.is_identity = is_identity.get<bool>();
  const auto by_name = get("outputs_by_name", false);
  if (!by_name.is_boolean()) {
    throw malformed("outputs_by_name: expected a boolean, got " + type_name(by_name));
  }
  if (by_name.get<bool>() && (spec.outputs.empty() || spec.outputs.front().name.empty())) {
    throw malformed("outputs_by_name: true, but the spec records no output names");
  }
  spec.outputs_by_name = by_name.get<bool>();
  spec.device = get_string(get("device", "cpu"), "device");
  spec.torch_version = get_string(get("torch_version", "unknown"), "torch_version");
  spec.optimizations = get_string(get("optimizations", ""), "optimizations");
  spec.cache_key = get_string(get("cache_key", ""), "cache_key");
  spec.onnx_mode = get_string(get("onnx_mode", ""), "onnx_mode");
  get_array(get("verified", json::array()), "verified");
  if (const auto& check = get("eager_check", nullptr); !check.is_null()) {
    spec.eager_check = get_tolerance(check, "eager_check");
  }
  spec.inductor_configs = get_inductor_configs(get("inductor_configs", json::object()));
  spec.tuning = get_tuning(get("tuning", json::array()));
  spec.constant_inputs = get_constant_inputs(get("constant_inputs", json::array()));
  spec.quantization = get_quantization(get("quantization", json::object()));
  return spec;
}

int written_schema_version(const PackageSpec& spec) {
  for (const auto* tensors : {&spec.inputs, &spec.outputs}) {
    for (const auto& tensor : *tensors) {
      for (const auto& dim : tensor.dims) {
        if (dim.unbounded()) {
          return kUnboundedSchemaVersion;
        }
      }
    }
  }
  return 2;
}

json spec_to_document(const PackageSpec& spec) {
  json groups = json::array();
  for (const auto& group : spec.shared_dims) {
    json positions = json::array();
    for (const auto& [i, d] : group) {
      positions.push_back({i, d});
    }
    groups.push_back(positions);
  }
  json ops = json::array();
  for (const auto& op : spec.required_ops) {
    json entry = {{"name", op.name}};
    if (op.overload) {
      entry["overload"] = *op.overload;
    }
    ops.push_back(entry);
  }
  json document = {
      {"schema_version", written_schema_version(spec)},
      {"inputs", tensor_specs_document(spec.inputs)},
      {"example_shapes", spec.example_shapes},
      {"shared_dims", groups},
      {"device", spec.device},
      {"required_ops", ops},
      {"required_classes", spec.required_classes},
      {"python_only_ops", spec.python_only_ops},
      {"op_libraries", spec.op_libraries},
      {"fake_modules", spec.fake_modules},
      {"is_identity", spec.is_identity},
      {"torch_version", spec.torch_version},
      {"cpu_flags", spec.cpu_flags},
      {"optimizations", spec.optimizations},
      {"cache_key", spec.cache_key},
      {"onnx_mode", spec.onnx_mode},
  };
  if (!spec.outputs.empty()) {  // written only when recorded, as in Python
    document["outputs"] = tensor_specs_document(spec.outputs);
  }
  if (spec.outputs_by_name) {  // written only when true, as in Python
    document["outputs_by_name"] = true;
  }
  if (!spec.cpu_target.empty()) {  // written only when recorded, as in Python
    document["cpu_target"] = spec.cpu_target;
  }
  if (spec.intra_op_threads > 0) {  // written only when recorded, as in Python
    document["intra_op_threads"] = spec.intra_op_threads;
  }
  if (!spec.op_library_namespaces.empty()) {  // written only when known, as in Python
    document["op_library_namespaces"] = spec.op_library_namespaces;
  }
  if (spec.eager_check) {
    document["eager_check"] = tolerance_to_document(*spec.eager_check);
  }
  if (!spec.inductor_configs.empty()) {  // written only when given, as in Python
    json configs = json::object();
    for (const auto& [key, text] : spec.inductor_configs) {
      configs[key] = json::parse(text);
    }
    document["inductor_configs"] = configs;
  }
  if (!spec.tuning.empty()) {  // written only when given, as in Python
    document["tuning"] = spec.tuning;
  }
  if (!spec.quantization.empty()) {  // written only when given, as in Python
    document["quantization"] = spec.quantization;
  }
  if (!spec.constant_inputs.empty()) {
    document["constant_inputs"] = spec.constant_inputs;
  }
  return document;
}

namespace {

// The legacy grammar: sizes are plain decimal digits only ("1_0", " 3", "+3" and
// empty parts are malformed), as in the Python converter.
int64_t legacy_int(const std::string& text, const std::string& where) {
  const bool digits = !text.empty() &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  try {
    if (digits) {
      return std::stoll(text);
    }
  } catch (const std::out_of_range&) {  // past int64: malformed, as in Python's parse
  }
  throw malformed(where + ": expected a non-negative integer, got " + brief_json(text));
}

// "" -> {}; otherwise every part, empty ones included (the caller refuses them).
std::vector<std::string> legacy_split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  if (text.empty()) {
    return parts;
  }
  size_t start = 0;
  while (true) {
    const auto end = text.find(sep, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) {
      return parts;
    }
    start = end + 1;
  }
}

}  // namespace

json legacy_document(const std::map<std::string, std::string>& metadata) {
  const auto get = [&](const std::string& key, const std::string& fallback = "") {
    const auto it = metadata.find(kLegacyPrefix + key);
    return it == metadata.end() ? fallback : it->second;
  };
  const auto names = [&](const std::string& key) {
    const auto parts = legacy_split(get(key), ',');
    for (const auto& part : parts) {
      if (part.empty()) {
        throw malformed(std::string(kLegacyPrefix) + key + ": empty entry in " + brief_json(get(key)));
      }
    }
    return parts;
  };

  json inputs = json::array();
  for (const auto& text : legacy_split(get("inputs"), ';')) {
    const auto colon = text.find(':');
    if (colon == std::string::npos || colon == 0) {
      throw malformed(std::string(kLegacyPrefix) + "inputs: input spec " + brief_json(text) +
                      " has no dtype");
    }
    const auto where = std::string(kLegacyPrefix) + "inputs: input spec " + brief_json(text);
    json dims = json::array();
    for (const auto& dim : legacy_split(text.substr(colon + 1), ',')) {
      const auto dots = dim.find("..");
      const auto low = legacy_int(dots == std::string::npos ? dim : dim.substr(0, dots), where);
      const auto high = dots == std::string::npos ? low : legacy_int(dim.substr(dots + 2), where);
      dims.push_back({{"min", low}, {"max", high}});
    }
    inputs.push_back({{"dtype", text.substr(0, colon)}, {"dims", dims}});
  }

  // The old writer joined shapes with ";" and sizes with ",", so a 0-d input's shape
  // is an empty part: keep empty parts when they give one shape per input. An empty
  // entry with no 0-d input means no shapes were recorded.
  const auto shapes_text = get("example_shapes");
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const auto end = shapes_text.find(';', start);
    parts.push_back(shapes_text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const bool no_scalar = std::all_of(inputs.begin(), inputs.end(),
                                     [](const json& item) { return !item["dims"].empty(); });
  json shapes = json::array();
  if (shapes_text.empty() && no_scalar) {
    // no shapes
  } else if (parts.size() == inputs.size()) {
    for (const auto& part : parts) {
      json shape = json::array();
      for (const auto& size : legacy_split(part, ',')) {
        shape.push_back(legacy_int(size, std::string(kLegacyPrefix) + "example_shapes"));
      }
      shapes.push_back(shape);
    }
  } else {
    throw malformed(std::string(kLegacyPrefix) + "example_shapes: " + std::to_string(parts.size()) +
                    " shape(s) for " + std::to_string(inputs.size()) + " input(s)");
  }

  json groups = json::array();
  for (const auto& group : legacy_split(get("shared_dims"), ';')) {
    json positions = json::array();
    for (const auto& position : legacy_split(group, ',')) {
      const auto where = std::string(kLegacyPrefix) + "shared_dims";
      const auto dot = position.find('.');
      if (dot == std::string::npos) {
        throw malformed(where + ": expected INPUT.DIM, got " + brief_json(position));
      }
      positions.push_back({legacy_int(position.substr(0, dot), where),
                           legacy_int(position.substr(dot + 1), where)});
    }
    groups.push_back(positions);
  }

  json ops = json::array();
  for (const auto& name : names("required_ops")) {
    ops.push_back({{"name", name}});  // schema 1 recorded no overloads: any will do
  }
  std::vector<std::string> flags;
  std::istringstream words(get("cpu_flags"));
  for (std::string word; words >> word;) {
    flags.push_back(word);
  }
  return {
      {"schema_version", 1},
      {"inputs", inputs},
      {"example_shapes", shapes},
      {"shared_dims", groups},
      {"device", get("device", "cpu")},
      {"required_ops", ops},
      {"required_classes", names("required_classes")},
      {"python_only_ops", names("python_only_ops")},
      {"op_libraries", names("op_libraries")},
      {"fake_modules", names("fake_modules")},
      {"is_identity", get("is_identity") == "1"},
      {"torch_version", get("torch_version", "unknown")},
      {"cpu_flags", flags},
      {"optimizations", get("optimizations")},
      {"cache_key", get("cache_key")},
      {"onnx_mode", get("onnx_mode")},
  };
}

PackageSpec spec_from_metadata(const std::map<std::string, std::string>& metadata,
                               const std::string& path) {
  json document;
  const auto it = metadata.find(kSpecKey);
  if (it != metadata.end()) {
    try {
      document = parse_json_limited(it->second);
    } catch (const JsonTextError& e) {  // a syntax error, a number past double's range, or too deep
      throw malformed(std::string(kSpecKey) + " is not valid JSON (" + e.what() + ")");
    }
  } else if (metadata.count(std::string(kLegacyPrefix) + "inputs")) {
    document = legacy_document(metadata);
  } else {
    throw RunnerError("package " + path + " has no aoti_deploy spec (no '" + kSpecKey +
                          "' entry), so its inputs cannot be validated.\nCreate the package with "
                          "`export_compile`, which records it.",
                      "missing");
  }
  auto spec = parse_spec_document(document);
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kLegacyPrefix, 0) != 0) {
      spec.aoti[key] = value;
    }
  }
  return spec;
}

std::vector<std::pair<std::string, std::string>> describe_package(const PackageSpec& spec) {
  std::vector<std::pair<std::string, std::string>> rows;
  const auto tensor_rows = [&](const std::string& name, const std::vector<TensorSpec>& specs) {
    for (size_t i = 0; i < specs.size(); ++i) {
      rows.emplace_back(name + "[" + std::to_string(i) + "]",
                        (specs[i].name.empty() ? "" : specs[i].name + "  ") + describe_tensor(specs[i]));
    }
  };
  tensor_rows("input", spec.inputs);
  // Each input's value range under its row, as aoti-deploy inspect shows it.
  for (size_t i = spec.inputs.size(); i-- > 0;) {
    if (const auto& values = spec.inputs[i].values) {
      rows.insert(rows.begin() + static_cast<std::ptrdiff_t>(i + 1),
                  {"input[" + std::to_string(i) + "] values",
                   std::to_string(values->min) + ".." + std::to_string(values->max) + " (" + values->why + ")"});
    }
  }
  tensor_rows("output", spec.outputs);
  const auto aoti = [&](const std::string& key) {
    const auto it = spec.aoti.find(key);
    return it == spec.aoti.end() ? std::string() : it->second;
  };
  std::vector<std::string> ops;
  for (const auto& op : spec.required_ops) {
    ops.push_back(op.str());
  }
  std::vector<std::string> groups;
  for (const auto& group : spec.shared_dims) {
    std::vector<std::string> positions;
    for (const auto& [i, d] : group) {
      positions.push_back("input[" + std::to_string(i) + "] dim " + std::to_string(d));
    }
    groups.push_back(join(positions, " = "));
  }
  rows.emplace_back("spec", "schema " + std::to_string(spec.schema_version) +
                                (spec.schema_version < 2 ? " (legacy entries)" : ""));
  rows.emplace_back("device", spec.device);
  rows.emplace_back("required ops", join(ops, ", "));
  rows.emplace_back("required classes", join(spec.required_classes, ", "));
  rows.emplace_back("op libraries", join(spec.op_libraries, ", "));
  rows.emplace_back("python-only ops",
                    spec.python_only_ops.empty() ? "none" : join(spec.python_only_ops, ", "));
  rows.emplace_back("fake modules", join(spec.fake_modules, ", "));
  rows.emplace_back("shared dims", join(groups, "; "));
  rows.emplace_back("optimizations", spec.optimizations);
  rows.emplace_back("eager check",
                    spec.eager_check ? spec.eager_check->describe()
                                     : "not recorded (--expected compares bitwise; --eager-reference "
                                       "uses torch.testing's defaults)");
  rows.emplace_back("identity model", spec.is_identity ? "yes" : "no");
  rows.emplace_back("torch version", spec.torch_version);
  rows.emplace_back("platform", aoti("AOTI_PLATFORM") + " " + aoti("AOTI_MACHINE"));
  rows.emplace_back("cpu target", spec.cpu_target.empty() ? "native (not recorded)" : spec.cpu_target);
  rows.emplace_back("intra-op threads",
                    spec.intra_op_threads > 0 ? std::to_string(spec.intra_op_threads) : "not recorded");
  rows.emplace_back("cpu isa", aoti("AOTI_CPU_ISA"));
  rows.emplace_back("compute capability", aoti("AOTI_COMPUTE_CAPABILITY"));
  if (!spec.onnx_mode.empty()) {
    rows.emplace_back("onnx mode", spec.onnx_mode);
  }
  if (!spec.inductor_configs.empty()) {
    std::vector<std::string> settings;
    for (const auto& [key, text] : spec.inductor_configs) {
      settings.push_back(key + "=" + text);
    }
    rows.emplace_back("inductor configs", join(settings, ", "));
  }
  for (const auto& row : spec.tuning) {
    // Python's ":.0f", which rounds as printf does (to nearest, ties to even).
    std::string timed("not timed");
    if (const auto& p50 = row.at("p50_us"); !p50.is_null()) {
      char buffer[400];  // a double below 1.8e308 has at most 309 digits before the point
      std::snprintf(buffer, sizeof buffer, "p50 %.0f \u00b5s", p50.get<double>());
      timed = buffer;
    }
    rows.emplace_back(std::string("tuning: ").append(row.at("name").get<std::string>()),
                      timed.append("; ").append(row.at("result").get<std::string>()));
  }
  if (!spec.quantization.empty()) {
    rows.emplace_back("quantization", describe_quantization(spec.quantization));
  }
  return rows;
}

}  // namespace aoti_runner
