// A Triton model's config.pbtxt (as the JSON Triton hands a backend) and the backend's
// own settings, read with nlohmann-json and checked against the package spec before
// anything loads. The names and types follow python/aoti_deploy/serve/triton_config.py,
// which writes the config from the same spec; tests/contract/triton_name_vectors.json pins
// the names and parameters on both sides.
#pragma once

#include "malloc_policy.h"
#include "package_spec.h"
#include "triton_api.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace aoti_triton {

// The package's flat inputs and outputs go by the names its spec records (e.g.
// input_ids, logits), else by INPUT__0, INPUT__1, ... and OUTPUT__0, ...
inline constexpr const char* kInputPrefix = "INPUT__";
inline constexpr const char* kOutputPrefix = "OUTPUT__";

// The name of the package's tensor `index` in the config and in requests: the spec's
// recorded name, else prefix + index (also for an index past `specs`, as for the
// outputs of a package that records none). The rule of triton_config's names.
std::string served_name(const std::vector<aoti_runner::TensorSpec>& specs, size_t index, const char* prefix);

// The served names of `count` tensors, for messages: "input_ids, attention_mask" when
// the spec records names, else "INPUT__0..INPUT__2" or "INPUT__0"; "none" for none.
std::string served_names(const std::vector<aoti_runner::TensorSpec>& specs, size_t count, const char* prefix);

struct ConfigTensor {
  std::string name;
  std::string data_type;      // "TYPE_FP32", ...
  std::vector<int64_t> dims;  // without the batch dim when max_batch_size > 0; -1: any size
  // Triton's reshape: the shape the model takes or returns (without the batch dim),
  // when requests carry another one (dims). Triton converts both ways itself, so the
  // backend only ever sees this shape. A package tensor that is only its batch dim is
  // served batched as dims [1] with reshape [] (requests [batch, 1], the model [batch]).
  std::optional<std::vector<int64_t>> reshape;

  // The shape the backend sees, without the batch dim.
  const std::vector<int64_t>& model_dims() const { return reshape ? *reshape : dims; }
};

struct InstanceGroup {
  std::string kind;           // "KIND_CPU", "KIND_GPU", ... (KIND_AUTO when not written)
  int64_t count = 1;          // instances per device (per GPU for KIND_GPU)
  std::vector<int64_t> gpus;  // the GPUs of a KIND_GPU group, as Triton completed them
};

struct ModelConfig {
  std::string name;
  int64_t max_batch_size = 0;  // > 0: every input and output has an implicit batch dim 0
  std::vector<ConfigTensor> inputs;
  std::vector<ConfigTensor> outputs;
  std::vector<InstanceGroup> instance_groups;
  // Every instance the groups start: count per group, times its GPUs for KIND_GPU.
  int64_t instance_count = 0;
  std::map<std::string, std::string> parameters;  // string_value of each parameter
  // Test-only (the test_delay_ms parameter, 0..60000): execute waits this long after
  // reading its requests, so a test can cancel or unload while the backend holds them.
  int test_delay_ms = 0;
};

// The instances of the model that run on one device: a CPU model's all of them
// (device_id ignored), a GPU model's those of the groups that list that GPU.
int64_t instances_on_device(const ModelConfig& config, bool gpu, int32_t device_id);

// Throws RunnerError naming the field.
ModelConfig parse_model_config(const nlohmann::json& config);

// What the server's command line sets for every model of this backend
// (--backend-config=aoti,KEY=VALUE): a model's config cannot weaken it. An unknown key
// is an error: a misspelt trusted-key must not turn verification off.
struct BackendSettings {
  std::string trusted_key;  // trusted-key: verify every bundle with this PEM public key
  aoti_runner::MallocPolicy malloc_policy = aoti_runner::MallocPolicy::kRetain;  // malloc
};
BackendSettings parse_backend_config(const nlohmann::json& config);

// Refuses a config that does not describe the package: input and output names, data
// types, ranks, fixed sizes outside the spec's ranges (of the reshape, when a tensor has
// one: the shape the backend sees), an instance kind for another device, and a batch
// dim the package does not have. A batch dim is every input's dim 0, one dynamic size
// tied to no other dim, followed by every recorded output's dim 0: the rule of
// triton_config's batch_dim, so merged requests stay in the spec. A tensor that is only
// its batch dim needs dims [1] with reshape [] in a batched config. The request-time
// checks (validation.h) then see only shapes Triton let through.
void check_config_against_spec(const ModelConfig& config, const aoti_runner::PackageSpec& spec);

// "TYPE_FP32" for "float32"; nullopt for a dtype Triton has no type for.
std::optional<std::string> config_type_of(const std::string& dtype);
TRITONSERVER_DataType server_type_of(const std::string& dtype);
// "float32" for TRITONSERVER_TYPE_FP32; "" for a type no package takes (BYTES, ...).
std::string dtype_of(TRITONSERVER_DataType type);

// Intra-op threads per instance: the intra_op_threads parameter, else the CPU budget's
// rule (cpu_budget.h) over every instance the server runs, of every model, with one
// CPU left to Triton's own threads.
int intra_op_threads(const ModelConfig& config, int cpus, int64_t server_instances);

}  // namespace aoti_triton
