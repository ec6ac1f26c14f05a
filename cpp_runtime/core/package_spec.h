// The package spec: what a package needs and accepts, recorded by export_compile as
// one versioned JSON document under the metadata key "aoti_deploy.spec", parsed
// here with nlohmann-json. Pairs with python/aoti_deploy/package/spec.py (and spec_fields.py, spec_legacy.py); the
// vectors in tests/contract/spec_vectors.json pin both parsers to one verdict.
#pragma once

#include "tolerance.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

constexpr const char* kSpecKey = "aoti_deploy.spec";
// The newest schema this runner reads. A writer records the lowest version whose
// readers understand the document, so older runners keep reading what they can:
// 2, or 3 when a dim is unbounded ("max": null), which a version-2 reader cannot read.
constexpr int kSchemaVersion = 3;
constexpr int kUnboundedSchemaVersion = 3;
// Before the JSON document: one metadata entry per field, "aoti_deploy.<field>".
constexpr const char* kLegacyPrefix = "aoti_deploy.";

// One dimension of a tensor spec: a fixed size, a [min, max] range, or min and up
// (no max: unbounded, "max": null in the document).
struct DimSpec {
  int64_t min = 0;
  std::optional<int64_t> max = 0;
  bool is_static() const {
    return max && min == *max;
  }
  bool unbounded() const {
    return !max;
  }
  bool contains(int64_t size) const {
    return min <= size && (!max || size <= *max);
  }
  // "3", "1..8" or "1..unbounded", as shapes print.
  std::string str() const;
  // What a size must be, for messages: "3", "a size in [1, 8]" or "a size >= 1".
  std::string wanted() const;
};

// The values an integer input may hold, inclusive: where it indexes a tensor, any
// other value makes the compiled kernel abort the process (the check sits in an
// OpenMP region). `why` says what it indexes, for messages.
struct ValueRange {
  int64_t min = 0;
  int64_t max = 0;
  std::string why;
  std::string str() const;  // "[min, max]"
};

// A tensor's name may be an identifier, dots allowed after the first character
// ([A-Za-z_][A-Za-z0-9_.]*), of at most kTensorNameLimit characters.
constexpr size_t kTensorNameLimit = 128;

// What an output is: a tensor, or a Python scalar the model returns (a SymInt, SymFloat
// or SymBool, or a constant), carried by every runtime as a 0-d tensor of its kind's
// dtype: "int" int64, "float" float64, "bool" bool. spec_types.py's SCALAR_DTYPES.
constexpr const char* kTensorKind = "tensor";
// The dtype a scalar kind is carried in; none for "tensor" or an unknown kind.
std::optional<std::string> scalar_dtype_of_kind(const std::string& kind);

struct TensorSpec {
  std::vector<DimSpec> dims;
  std::string dtype;  // Python spelling: "float32", "bfloat16", ...
  // Inputs only, when export saw (or was told) which values index a tensor.
  std::optional<ValueRange> values;
  // The model's name for the tensor (e.g. "input_ids"); empty when not recorded. Either
  // every input (output) of a spec has one, or none does.
  std::string name;
  // Outputs only: kTensorKind, or the Python scalar the model returns there ("int",
  // "float", "bool"; no dims, dtype scalar_dtype_of_kind(kind)).
  std::string kind = kTensorKind;
  bool is_scalar() const {
    return kind != kTensorKind;
  }
};

// A custom op the package calls, with its overload ("default" for the unnamed one);
// no overload (packages from before overloads were recorded): any overload will do.
struct OpRef {
  std::string name;
  std::optional<std::string> overload;
  std::string str() const;  // "ns::op" or "ns::op.overload"
};

struct PackageSpec {
  std::vector<TensorSpec> inputs;
  // The flat outputs (pytree order), for serving configs that declare them. Empty when
  // not recorded: packages from before, or a model with a non-tensor output.
  std::vector<TensorSpec> outputs;
  // True when the model returns its outputs by name (a dict, or a ModelOutput), so the
  // recorded output names are its keys: the runners print and write the outputs by them.
  // False (not written) for a tensor, a tuple, and packages from before it was recorded.
  bool outputs_by_name = false;
  std::string device = "cpu";
  std::vector<OpRef> required_ops;
  std::vector<std::string> required_classes;
  std::vector<std::string> op_libraries;
  // Which op namespaces each of op_libraries registers (empty when not recorded), so
  // a runner can say which library a missing op needs.
  std::map<std::string, std::vector<std::string>> op_library_namespaces;
  bool is_identity = false;
  std::string torch_version = "unknown";
  // The shapes the package was verified at (none, or one per input).
  std::vector<std::vector<int64_t>> example_shapes;
  // The instruction-set flags a host needs: the CPU target's (a psABI level), or for
  // native (-march=native) every flag of the compile host.
  std::vector<std::string> cpu_flags;
  // "native", a target such as "x86-64-v3", or "" (from before targets were recorded).
  std::string cpu_target;
  // The intra-op thread count the package was compiled (its weights laid out) for; 0
  // when not recorded (older packages, CUDA packages).
  int64_t intra_op_threads = 0;
  // Ops only Python can run (exported with --allow-python-ops): this runner refuses.
  std::vector<std::string> python_only_ops;
  // Modules the Python runner imports for fakes or Python ops (shown by --inspect).
  std::vector<std::string> fake_modules;
  std::string optimizations;  // what export_compile's graph optimizations did
  // Groups of (input, dim) positions that must have equal sizes (one dynamic dim).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> shared_dims;
  std::string cache_key;
  std::string onnx_mode;
  // The rule compiled code was held to against eager at export; --eager-reference
  // applies it too. Unset in packages from before it was recorded.
  std::optional<Tolerance> eager_check;
  // The Inductor settings the package was compiled with (export's inductor_configs),
  // each value a boolean, integer or string as JSON text; shown by --inspect.
  std::map<std::string, std::string> inductor_configs;
  // The non-tensor inputs torch.export baked in ({"name", "index", "value"} objects).
  // Only the Python runtime checks them; kept here so both readers round-trip alike.
  nlohmann::json constant_inputs = nlohmann::json::array();
  // An export with optimize="tune": each candidate's {"name", "inductor_configs",
  // "p50_us", "result"}; shown by --inspect, not used by the runners.
  nlohmann::json tuning = nlohmann::json::array();
  // An int8 export: {"mode", the counts "calibration_calls", "convolutions", "linears",
  // "fp32_heavy", "int8_convolutions", "int8_linears", "max_abs", "top1_agreement"};
  // {} when none. Shown by --inspect, not used by the runners.
  nlohmann::json quantization = nlohmann::json::object();
  int schema_version = kSchemaVersion;  // the version the spec was read from
  std::map<std::string, std::string> aoti;  // AOTI's own metadata entries (ISA, machine, ...)
};

// Validates a spec document and builds the PackageSpec. Unknown keys are ignored.
// Throws RunnerError of kind "malformed" or "unsupported_version".
PackageSpec parse_spec_document(const nlohmann::json& document);

// The lowest schema version that can hold the spec: kUnboundedSchemaVersion with an
// unbounded dim, else 2.
int written_schema_version(const PackageSpec& spec);

// The document of a spec (schema written_schema_version), as the Python writer writes it.
nlohmann::json spec_to_document(const PackageSpec& spec);

// Converts the "aoti_deploy.*" entries of a package from before the document.
// Throws RunnerError of kind "malformed".
nlohmann::json legacy_document(const std::map<std::string, std::string>& metadata);

// The spec of a package's metadata: the document, else the legacy entries.
// Throws RunnerError of kind "missing", "malformed" or "unsupported_version".
PackageSpec spec_from_metadata(const std::map<std::string, std::string>& metadata,
                               const std::string& path);

// The facts --inspect prints, as ordered (name, value) rows (the same rows as
// aoti-deploy inspect).
std::vector<std::pair<std::string, std::string>> describe_package(const PackageSpec& spec);

std::string format_shape(const TensorSpec& spec);

// What --inspect shows of a tensor: "[1..8, 3] float32", or for a scalar output "int
// (a 0-d int64 tensor)". The same as spec_types.py's TensorSpec.describe.
std::string describe_tensor(const TensorSpec& spec);

// How messages name a tensor: "input[0]", or "input[0] (input_ids)" when the package
// records names (role "input" or "output"). The same as spec.py's tensor_label.
std::string tensor_label(const std::string& role, size_t index, const std::vector<TensorSpec>& specs);

// The recorded names of `specs` in order, or none when they have none.
std::vector<std::string> tensor_names(const std::vector<TensorSpec>& specs);

// The output names to print and write `count` outputs by: the recorded names when the
// model returns its outputs by name and `count` is their number, else none (index them).
// The same as spec.py's PackageSpec.named_outputs.
std::vector<std::string> named_outputs(const PackageSpec& spec, size_t count);

}  // namespace aoti_runner
