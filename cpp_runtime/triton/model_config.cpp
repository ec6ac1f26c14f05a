#include "model_config.h"

#include "cpu_budget.h"
#include "dtypes.h"
#include "errors.h"
#include "package_spec.h"
#include "text.h"
#include "validation.h"

#include <algorithm>
#include <array>
#include <limits>

namespace aoti_triton {

using aoti_runner::RunnerError;
using nlohmann::json;

namespace {

// Triton's data types by name (the inference protocol's spelling). Which dtype has
// which type is the core dtype table's (dtypes.h); this is only Triton's own enum.
struct ServerType {
  const char* name;
  TRITONSERVER_DataType type;
};
constexpr std::array<ServerType, 13> kServerTypes{{
    {"BOOL", TRITONSERVER_TYPE_BOOL},
    {"UINT8", TRITONSERVER_TYPE_UINT8},
    {"UINT16", TRITONSERVER_TYPE_UINT16},
    {"UINT32", TRITONSERVER_TYPE_UINT32},
    {"UINT64", TRITONSERVER_TYPE_UINT64},
    {"INT8", TRITONSERVER_TYPE_INT8},
    {"INT16", TRITONSERVER_TYPE_INT16},
    {"INT32", TRITONSERVER_TYPE_INT32},
    {"INT64", TRITONSERVER_TYPE_INT64},
    {"FP16", TRITONSERVER_TYPE_FP16},
    {"FP32", TRITONSERVER_TYPE_FP32},
    {"FP64", TRITONSERVER_TYPE_FP64},
    {"BF16", TRITONSERVER_TYPE_BF16},
}};

// Triton serialises the config as protobuf JSON: int64 fields (dims) as strings,
// int32 ones (max_batch_size, count) as numbers. Either is read.
int64_t integer(const json& value, const std::string& where) {
  if (value.is_number_integer()) {
    return value.get<int64_t>();
  }
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    size_t used = 0;
    try {
      const auto parsed = std::stoll(text, &used);
      if (used == text.size()) {
        return parsed;
      }
    } catch (const std::exception&) {
    }
  }
  throw RunnerError("config.pbtxt: " + where + " must be an integer, got " + value.dump() + ".");
}

std::string text(const json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    throw RunnerError("config.pbtxt: " + where + " has no " + key + ".");
  }
  return it->get<std::string>();
}

std::vector<ConfigTensor> tensors(const json& config, const char* key) {
  std::vector<ConfigTensor> result;
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    return result;
  }
  if (!it->is_array()) {
    throw RunnerError(std::string("config.pbtxt: ") + key + " must be a list.");
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& item = (*it)[i];
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!item.is_object()) {
      throw RunnerError("config.pbtxt: " + where + " must be a message.");
    }
    ConfigTensor tensor;
    tensor.name = text(item, "name", where);
    tensor.data_type = text(item, "data_type", where + " (" + tensor.name + ")");
    if (const auto dims = item.find("dims"); dims != item.end() && dims->is_array()) {
      for (const auto& dim : *dims) {
        tensor.dims.push_back(integer(dim, where + " dims"));
      }
    }
    // Protobuf's JSON may leave out an empty shape: "reshape": {} is reshape [].
    if (const auto reshape = item.find("reshape"); reshape != item.end() && !reshape->is_null()) {
      if (!reshape->is_object()) {
        throw RunnerError("config.pbtxt: " + where + " (" + tensor.name + ") reshape must be a message.");
      }
      auto& shape = tensor.reshape.emplace();
      if (const auto dims = reshape->find("shape"); dims != reshape->end() && dims->is_array()) {
        for (const auto& dim : *dims) {
          shape.push_back(integer(dim, where + " reshape shape"));
        }
      }
    }
    result.push_back(std::move(tensor));
  }
  return result;
}

// The config's entries by name (the served names of `specs`), each named exactly
// once, and no other names.
std::vector<const ConfigTensor*> by_index(const std::vector<ConfigTensor>& entries,
                                          const std::vector<aoti_runner::TensorSpec>& specs, const char* prefix,
                                          size_t count, const char* what) {
  std::vector<const ConfigTensor*> found(count, nullptr);
  for (const auto& entry : entries) {
    size_t index = count;
    for (size_t i = 0; i < count; ++i) {
      if (entry.name == served_name(specs, i, prefix)) {
        index = i;
      }
    }
    if (index == count) {
      throw RunnerError("config.pbtxt: " + std::string(what) + " '" + entry.name +
                        "' is not one of the package's: it has " + std::to_string(count) + " " + what +
                        "(s), named " + served_names(specs, count, prefix) +
                        ". Write the config with aoti-deploy triton-repository.");
    }
    if (found[index] != nullptr) {
      throw RunnerError("config.pbtxt: " + std::string(what) + " '" + entry.name + "' is listed twice.");
    }
    found[index] = &entry;
  }
  return found;
}

void check_tensor(const ConfigTensor& entry, const aoti_runner::TensorSpec& spec, int64_t max_batch_size,
                  const char* what) {
  const auto expected_type = config_type_of(spec.dtype);
  if (!expected_type) {
    std::string servable;
    for (const auto& name : aoti_runner::triton_servable_names()) {
      servable += (servable.empty() ? "" : ", ") + name;
    }
    throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + ": the package's dtype is " +
                      spec.dtype + ", which Triton has no data type for, so the aoti backend cannot serve it. "
                      "Export the model with tensors of a dtype Triton serves: " + servable + ".");
  }
  if (entry.data_type != *expected_type) {
    throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + " has data_type " +
                      entry.data_type + ", but the package's is " + spec.dtype +
                      " (" + *expected_type + ").");
  }
  // A Python scalar output (an int, float or bool; 0-d in the package) travels as a
  // one-element tensor: the writer declares [1] with no reshape (Triton refuses an empty
  // reshape in a model without batching), and the backend answers [1] for the 0-d tensor.
  if (spec.is_scalar()) {
    if (entry.dims != std::vector<int64_t>{1} || entry.reshape || max_batch_size > 0) {
      throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + " is a Python " + spec.kind +
                        " (a 0-d " + spec.dtype + " tensor in the package), which the aoti backend serves as a " +
                        "one-element tensor in a model without batching: declare it as dims: [ 1 ], with no " +
                        "reshape and max_batch_size: 0 (aoti-deploy triton-repository writes this).");
    }
    return;
  }
  if (max_batch_size > 0 && spec.dims.size() == 1 && !entry.reshape) {
    throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + " is only the batch dim in the " +
                      "package " + aoti_runner::format_shape(spec) + " (one value per example), and Triton " +
                      "batches tensors with a dim after the batch: declare it as dims: [ 1 ] with reshape: { " +
                      "shape: [ ] }, so requests carry [batch, 1] and the model sees [batch] (aoti-deploy " +
                      "triton-repository writes this).");
  }
  std::vector<int64_t> full = entry.model_dims();
  if (max_batch_size > 0) {
    full.insert(full.begin(), -1);
  }
  if (full.size() != spec.dims.size()) {
    const char* which = entry.reshape ? (max_batch_size > 0 ? " (its reshape, with the batch dim)" : " (its reshape)")
                                      : (max_batch_size > 0 ? " (with the batch dim)" : "");
    throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + " has rank " +
                      std::to_string(full.size()) + " " + aoti_runner::format_sizes(full) + which +
                      ", but the package's is rank " + std::to_string(spec.dims.size()) + " " +
                      aoti_runner::format_shape(spec) + ".");
  }
  for (size_t d = 0; d < full.size(); ++d) {
    const auto& dim = spec.dims[d];
    if (full[d] != -1 && !dim.contains(full[d])) {
      throw RunnerError("config.pbtxt: " + std::string(what) + " " + entry.name + " dim " + std::to_string(d) +
                        " is " + std::to_string(full[d]) + ", outside the package's " +
                        aoti_runner::format_shape(spec) + ".");
    }
  }
}

}  // namespace

std::string served_name(const std::vector<aoti_runner::TensorSpec>& specs, size_t index, const char* prefix) {
  if (index < specs.size() && !specs[index].name.empty()) {
    return specs[index].name;
  }
  return prefix + std::to_string(index);
}

std::string served_names(const std::vector<aoti_runner::TensorSpec>& specs, size_t count, const char* prefix) {
  if (count == 0) {
    return "none";
  }
  if (!aoti_runner::tensor_names(specs).empty()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < count; ++i) {
      names.push_back(served_name(specs, i, prefix));
    }
    return aoti_runner::join(names, ", ");
  }
  std::string names = prefix + std::string("0");
  if (count > 1) {
    names.append("..").append(prefix).append(std::to_string(count - 1));
  }
  return names;
}

std::optional<std::string> config_type_of(const std::string& dtype) {
  const auto type = aoti_runner::triton_type(dtype);
  return type ? std::optional<std::string>("TYPE_" + *type) : std::nullopt;
}

TRITONSERVER_DataType server_type_of(const std::string& dtype) {
  if (const auto type = aoti_runner::triton_type(dtype)) {
    for (const auto& server : kServerTypes) {
      if (*type == server.name) {
        return server.type;
      }
    }
  }
  return TRITONSERVER_TYPE_INVALID;
}

std::string dtype_of(TRITONSERVER_DataType type) {
  for (const auto& server : kServerTypes) {
    if (type == server.type) {
      return aoti_runner::dtype_of_triton_type(server.name).value_or("");
    }
  }
  return "";
}

ModelConfig parse_model_config(const json& config) {
  if (!config.is_object()) {
    throw RunnerError("the model config is not a JSON object.");
  }
  ModelConfig result;
  result.name = config.value("name", std::string());
  if (const auto it = config.find("max_batch_size"); it != config.end()) {
    result.max_batch_size = integer(*it, "max_batch_size");
  }
  result.inputs = tensors(config, "input");
  result.outputs = tensors(config, "output");
  if (const auto groups = config.find("instance_group"); groups != config.end() && groups->is_array()) {
    for (size_t g = 0; g < groups->size(); ++g) {
      const auto& item = (*groups)[g];
      const std::string where = "instance_group[" + std::to_string(g) + "]";
      if (!item.is_object()) {
        throw RunnerError("config.pbtxt: " + where + " must be a message.");
      }
      InstanceGroup group;
      group.kind = item.value("kind", std::string("KIND_AUTO"));
      if (const auto count = item.find("count"); count != item.end()) {
        group.count = integer(*count, where + " count");
      }
      if (group.count < 1) {
        throw RunnerError("config.pbtxt: " + where + " count must be at least 1, got " +
                          std::to_string(group.count) + ".");
      }
      if (const auto gpus = item.find("gpus"); gpus != item.end() && gpus->is_array()) {
        for (const auto& gpu : *gpus) {
          group.gpus.push_back(integer(gpu, where + " gpus"));
        }
      }
      // Triton starts `count` instances on each GPU of a KIND_GPU group.
      const int64_t devices = group.kind == "KIND_GPU" ? std::max<int64_t>(1, group.gpus.size()) : 1;
      int64_t instances = 0;
      if (__builtin_mul_overflow(group.count, devices, &instances) ||
          __builtin_add_overflow(result.instance_count, instances, &result.instance_count)) {
        throw RunnerError("config.pbtxt: the instance_group counts overflow a 64-bit integer.");
      }
      result.instance_groups.push_back(std::move(group));
    }
  }
  if (const auto parameters = config.find("parameters"); parameters != config.end() && parameters->is_object()) {
    for (const auto& [key, value] : parameters->items()) {
      if (!value.is_object() || !value.contains("string_value") || !value["string_value"].is_string()) {
        throw RunnerError("config.pbtxt: parameter '" + key + "' needs a string_value.");
      }
      result.parameters[key] = value["string_value"].get<std::string>();
    }
  }
  // test_fault and test_delay_ms are for the backend's tests only: execute fails, or
  // waits, on purpose.
  static const std::array<const char*, 4> kKnown{"intra_op_threads", "trusted_key", "test_fault", "test_delay_ms"};
  for (const auto& [key, value] : result.parameters) {
    if (std::find_if(kKnown.begin(), kKnown.end(), [&name = key](const char* k) { return name == k; }) == kKnown.end()) {
      throw RunnerError("config.pbtxt: unknown parameter '" + key +
                        "'; the aoti backend takes intra_op_threads and trusted_key.");
    }
  }
  if (const auto it = result.parameters.find("test_fault"); it != result.parameters.end()) {
    static const std::array<const char*, 3> kSteps{"before_run", "after_run", "answering"};
    if (std::find_if(kSteps.begin(), kSteps.end(), [&](const char* step) { return it->second == step; }) ==
        kSteps.end()) {
      throw RunnerError("config.pbtxt: parameter test_fault (for the backend's tests only) must be before_run, "
                        "after_run or answering, got '" + it->second + "'.");
    }
  }
  if (const auto it = result.parameters.find("test_delay_ms"); it != result.parameters.end()) {
    const auto& text = it->second;
    const bool digits = !text.empty() && text.size() <= 5 &&
                        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoi(text) > 60000) {
      throw RunnerError("config.pbtxt: parameter test_delay_ms (for the backend's tests only) must be a whole "
                        "number of milliseconds from 0 to 60000, got '" + text + "'.");
    }
    result.test_delay_ms = std::stoi(text);
  }
  return result;
}

BackendSettings parse_backend_config(const json& config) {
  BackendSettings settings;
  const auto cmdline = config.is_object() ? config.find("cmdline") : config.end();
  if (!config.is_object() || cmdline == config.end() || !cmdline->is_object()) {
    return settings;
  }
  for (const auto& [key, value] : cmdline->items()) {
    const auto given = value.is_string() ? value.get<std::string>() : value.dump();
    if (key == "trusted-key") {
      settings.trusted_key = given;
    } else if (key == "malloc") {
      settings.malloc_policy =
          aoti_runner::parse_malloc_policy(given, "--backend-config=aoti,malloc=");
    } else if (key != "backend-directory" && key != "min-compute-capability" && key != "auto-complete-config" &&
               key != "default-max-batch-size") {  // the keys Triton adds itself
      throw RunnerError("--backend-config=aoti," + key + "=...: unknown setting; the aoti backend takes "
                        "trusted-key=PUB.pem and malloc=retain|system.");
    }
  }
  return settings;
}

void check_config_against_spec(const ModelConfig& config, const aoti_runner::PackageSpec& spec) {
  if (config.max_batch_size < 0) {
    throw RunnerError("config.pbtxt: max_batch_size must be >= 0, got " + std::to_string(config.max_batch_size) +
                      ".");
  }
  if (config.inputs.size() != spec.inputs.size()) {
    throw RunnerError("config.pbtxt lists " + std::to_string(config.inputs.size()) +
                      " input(s), but the package takes " + std::to_string(spec.inputs.size()) + " (" +
                      served_names(spec.inputs, spec.inputs.size(), kInputPrefix) +
                      "). Write the config with aoti-deploy triton-repository.");
  }
  const auto inputs = by_index(config.inputs, spec.inputs, kInputPrefix, spec.inputs.size(), "input");
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    check_tensor(*inputs[i], spec.inputs[i], config.max_batch_size, "input");
  }
  for (const auto& group : config.instance_groups) {
    const auto& kind = group.kind;
    const bool gpu_package = spec.device.rfind("cuda", 0) == 0;
    if ((gpu_package && kind != "KIND_GPU") || (!gpu_package && kind != "KIND_CPU")) {
      throw RunnerError("config.pbtxt: instance_group kind " + kind + ", but the package runs on " + spec.device +
                        ": use kind: " + (gpu_package ? "KIND_GPU" : "KIND_CPU") + ".");
    }
  }
  if (config.max_batch_size > 0) {
    const auto refuse = [&](const std::string& why) {
      throw RunnerError("config.pbtxt: max_batch_size " + std::to_string(config.max_batch_size) +
                        " needs a batch dim, but " + why +
                        ". Set max_batch_size: 0 with the full shapes (aoti-deploy triton-repository decides "
                        "this from the spec).");
    };
    if (spec.inputs.empty()) {
      refuse("the package takes no inputs");
    }
    const auto& batch = spec.inputs[0].dims.empty() ? aoti_runner::DimSpec{} : spec.inputs[0].dims[0];
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const auto& dims = spec.inputs[i].dims;
      if (dims.empty() || dims[0].is_static() || (dims[0].max && config.max_batch_size > *dims[0].max) ||
          dims[0].min != batch.min || dims[0].max != batch.max) {
        refuse(aoti_runner::tensor_label("input", i, spec.inputs) + " is " +
               aoti_runner::format_shape(spec.inputs[i]) +
               " (every input's dim 0 must be one dynamic range, up to at least max_batch_size)");
      }
    }
    // Every input's dim 0 in one shared group with nothing else: merging requests along
    // dim 0 must not change any other dim the compiled code ties to it.
    if (spec.inputs.size() > 1) {
      const bool one_group = std::any_of(spec.shared_dims.begin(), spec.shared_dims.end(), [&](const auto& group) {
        for (size_t i = 0; i < spec.inputs.size(); ++i) {
          if (std::find(group.begin(), group.end(), std::pair<int64_t, int64_t>{static_cast<int64_t>(i), 0}) ==
              group.end()) {
            return false;
          }
        }
        return true;
      });
      if (!one_group) {
        refuse("the inputs' dims 0 are not recorded as one size (shared dims)");
      }
    }
    for (const auto& group : spec.shared_dims) {
      const bool batch_group = std::find(group.begin(), group.end(), std::pair<int64_t, int64_t>{0, 0}) != group.end();
      for (const auto& [input, dim] : group) {
        if (batch_group && dim != 0) {
          refuse(aoti_runner::tensor_label("input", static_cast<size_t>(input), spec.inputs) + " dim " +
                 std::to_string(dim) + " is tied to the batch dim");
        }
      }
    }
    for (size_t k = 0; k < spec.outputs.size(); ++k) {
      const auto& dims = spec.outputs[k].dims;
      if (spec.outputs[k].is_scalar()) {
        refuse(aoti_runner::tensor_label("output", k, spec.outputs) + " is a Python " + spec.outputs[k].kind +
               ", one value for the whole call, which requests merged into one batch could not each get");
      }
      if (dims.empty() || dims[0].min != batch.min || dims[0].max != batch.max) {
        refuse(aoti_runner::tensor_label("output", k, spec.outputs) + " is " +
               aoti_runner::format_shape(spec.outputs[k]) + ", whose dim 0 does not follow the inputs' " +
               aoti_runner::format_shape(spec.inputs[0]));
      }
    }
  }
  if (!spec.outputs.empty()) {
    if (config.outputs.size() != spec.outputs.size()) {
      throw RunnerError("config.pbtxt lists " + std::to_string(config.outputs.size()) +
                        " output(s), but the package returns " + std::to_string(spec.outputs.size()) +
                        ". Write the config with aoti-deploy triton-repository.");
    }
    const auto outputs = by_index(config.outputs, spec.outputs, kOutputPrefix, spec.outputs.size(), "output");
    for (size_t i = 0; i < spec.outputs.size(); ++i) {
      check_tensor(*outputs[i], spec.outputs[i], config.max_batch_size, "output");
    }
  } else {
    by_index(config.outputs, spec.outputs, kOutputPrefix, config.outputs.size(), "output");
  }
}

int64_t instances_on_device(const ModelConfig& config, bool gpu, int32_t device_id) {
  int64_t instances = 0;
  for (const auto& group : config.instance_groups) {
    if (!gpu) {
      instances += group.count;
    } else if (group.gpus.empty() ||
               std::find(group.gpus.begin(), group.gpus.end(), static_cast<int64_t>(device_id)) != group.gpus.end()) {
      instances += group.count;
    }
  }
  return std::max<int64_t>(1, instances);
}

int intra_op_threads(const ModelConfig& config, int cpus, int64_t server_instances) {
  if (const auto it = config.parameters.find("intra_op_threads"); it != config.parameters.end()) {
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != it->second.size() || value < 1) {
      throw RunnerError("config.pbtxt: parameter intra_op_threads must be a positive integer, got '" +
                        it->second + "'.");
    }
    return value;
  }
  // One core is left to Triton's own threads (HTTP/gRPC, the batcher): OpenMP workers
  // spin while they wait: on 2 cores, 2 of them made a request tens of times slower.
  return aoti_runner::intra_op_threads_for(cpus, server_instances, /*reserved=*/1);
}

}  // namespace aoti_triton
