// contract_vectors SUITE FILE: runs each vector of a tests/contract/*.json file
// through the runner core and prints {"name": verdict, ...} as JSON. The pytest side
// (tests/test_contract.py) runs the same vectors through the Python modules and
// checks both against each vector's expected verdict. No Python in this process.
#include "check_plan.h"
#include "cpu_budget.h"
#include "dtypes.h"
#include "errors.h"
#include "input_shape.h"
#include "json_text.h"
#include "model_config.h"
#include "package_spec.h"
#include "preflight.h"
#include "private_folder.h"
#include "random_inputs.h"
#include "signature.h"
#include "tolerance.h"
#include "zip_archive.h"
#include "validation.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <optional>
#include <set>
#include <string>

namespace {

using aoti_runner::RunnerError;
using nlohmann::json;

// Metadata values are strings in a package; a vector may write a document as an
// object for readability, and it is serialized here as the writer would.
std::map<std::string, std::string> metadata_of(const json& metadata) {
  std::map<std::string, std::string> entries;
  for (const auto& [key, value] : metadata.items()) {
    entries[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return entries;
}

aoti_runner::PackageSpec spec_of(const json& vector) {
  auto spec = aoti_runner::parse_spec_document(vector.at("spec"));
  if (vector.contains("aoti")) {
    spec.aoti = vector.at("aoti").get<std::map<std::string, std::string>>();
  }
  return spec;
}

// A tensor from its bit patterns: {"dtype", "shape", "bits": ["0x3f800000", ...]}.
at::Tensor tensor_of(const json& description) {
  const auto dtype = *aoti_runner::dtype_from_name(description.at("dtype").get<std::string>());
  const auto shape = description.at("shape").get<std::vector<int64_t>>();
  std::vector<int64_t> values;
  for (const auto& bits : description.at("bits")) {
    values.push_back(static_cast<int64_t>(std::stoull(bits.get<std::string>(), nullptr, 16)));
  }
  const auto width = c10::elementSize(dtype);
  const auto int_dtype = width == 1 ? at::kByte : width == 2 ? at::kShort : width == 4 ? at::kInt : at::kLong;
  const auto raw = at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(int_dtype);
  return raw.view(dtype).reshape(shape);
}

// A tensor's bit patterns, as tensor_of reads them: "0x" and two hex digits per byte.
json bits_of(const at::Tensor& tensor) {
  const auto width = tensor.element_size();
  const auto int_dtype = width == 1 ? at::kByte : width == 2 ? at::kShort : width == 4 ? at::kInt : at::kLong;
  const auto raw = tensor.contiguous().view(int_dtype).to(at::kLong).reshape({-1});
  const uint64_t mask = width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
  json bits = json::array();
  for (int64_t i = 0; i < raw.numel(); ++i) {
    char text[24];
    std::snprintf(text, sizeof(text), "0x%0*llx", static_cast<int>(2 * width),
                  static_cast<unsigned long long>(static_cast<uint64_t>(raw[i].item<int64_t>()) & mask));
    bits.push_back(text);
  }
  return bits;
}

// A rule given as the spec's eager_check entry, read as package_spec.cpp reads it.
aoti_runner::Tolerance tolerance_of(const json& document) {
  return *aoti_runner::parse_spec_document(
              {{"schema_version", 2}, {"inputs", json::array()}, {"eager_check", document}})
              .eager_check;
}

// A made-up cgroup tree ({"relative/path": "contents"}) in a fresh temporary folder,
// removed again when this goes out of scope.
struct TemporaryTree {
  std::filesystem::path root;
  explicit TemporaryTree(const json& files) {
    char pattern[] = "/tmp/contract_vectors_cgroup_XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      throw std::runtime_error("could not make a temporary folder");
    }
    root = pattern;
    for (const auto& [name, text] : files.items()) {
      std::filesystem::create_directories((root / name).parent_path());
      std::ofstream(root / name) << text.get<std::string>();
    }
  }
  ~TemporaryTree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

// The backend's reading of a config with these inputs and outputs, checked against the
// package's spec as a model load checks it; nullopt where the backend refuses it.
std::optional<aoti_triton::ModelConfig> checked_config(const aoti_runner::PackageSpec& spec, int64_t max_batch_size,
                                                       const json& inputs, const json& outputs) {
  const json document = {{"name", "m"},
                         {"max_batch_size", max_batch_size},
                         {"input", inputs},
                         {"output", outputs},
                         {"instance_group", json::array({{{"kind", "KIND_CPU"}, {"count", 1}}})}};
  try {
    auto config = aoti_triton::parse_model_config(document);
    aoti_triton::check_config_against_spec(config, spec);
    return config;
  } catch (const RunnerError&) {
    return std::nullopt;
  }
}

// The batching suite's verdict for the batched config the writer would write: its
// max_batch_size and reshaped tensors, or "not_batched" when the backend refuses it.
json batched_verdict(const aoti_runner::PackageSpec& spec, bool drop_reshape) {
  if (spec.inputs.empty() || spec.inputs[0].dims.empty() || spec.inputs[0].dims[0].is_static()) {
    return "not_batched";
  }
  // An unbounded batch dim is capped at Triton's int32 limit, as the writer does.
  const auto max_batch_size =
      std::min<int64_t>(spec.inputs[0].dims[0].max.value_or(2147483647), 2147483647);
  const auto entries = [&](const std::vector<aoti_runner::TensorSpec>& tensors, const char* prefix) {
    json result = json::array();
    for (size_t i = 0; i < tensors.size(); ++i) {
      json dims = json::array();
      for (size_t d = 1; d < tensors[i].dims.size(); ++d) {
        dims.push_back(std::to_string(tensors[i].dims[d].is_static() ? tensors[i].dims[d].min : -1));
      }
      json entry = {{"name", aoti_triton::served_name(tensors, i, prefix)},
                    {"data_type", *aoti_triton::config_type_of(tensors[i].dtype)}};
      if (tensors[i].dims.size() == 1) {
        dims.push_back("1");
        if (!drop_reshape) {
          entry["reshape"] = json::object();
        }
      }
      entry["dims"] = dims;
      result.push_back(entry);
    }
    return result;
  };
  const auto checked = checked_config(spec, max_batch_size, entries(spec.inputs, aoti_triton::kInputPrefix),
                                      entries(spec.outputs, aoti_triton::kOutputPrefix));
  if (!checked) {
    return "not_batched";
  }
  const auto& config = *checked;
  json verdict = {{"max_batch_size", config.max_batch_size}};
  const auto reshaped = [](const std::vector<aoti_triton::ConfigTensor>& tensors) {
    json positions = json::array();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].reshape) {
        positions.push_back(i);
      }
    }
    return positions;
  };
  if (!reshaped(config.inputs).empty() || !reshaped(config.outputs).empty()) {
    verdict["reshaped"] = {{"inputs", reshaped(config.inputs)}, {"outputs", reshaped(config.outputs)}};
  }
  return verdict;
}

// A package with a Python scalar output, never batched: the config of its full shapes,
// each scalar output dims [1] (a hand_written vector's scalar_dims instead), read and
// checked by the backend. The scalar outputs' positions, or "refused".
json scalar_verdict(const aoti_runner::PackageSpec& spec, const json& scalar_dims) {
  const auto entries = [&](const std::vector<aoti_runner::TensorSpec>& tensors, const char* prefix) {
    json result = json::array();
    for (size_t i = 0; i < tensors.size(); ++i) {
      json dims = json::array();
      for (const auto& dim : tensors[i].dims) {
        dims.push_back(std::to_string(dim.is_static() ? dim.min : -1));
      }
      json entry = {{"name", aoti_triton::served_name(tensors, i, prefix)},
                    {"data_type", *aoti_triton::config_type_of(tensors[i].dtype)}};
      entry["dims"] = tensors[i].is_scalar() ? scalar_dims : dims;
      result.push_back(entry);
    }
    return result;
  };
  const auto checked = checked_config(spec, 0, entries(spec.inputs, aoti_triton::kInputPrefix),
                                      entries(spec.outputs, aoti_triton::kOutputPrefix));
  if (!checked) {
    return "refused";
  }
  const auto& config = *checked;
  json positions = json::array();
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    if (spec.outputs[k].is_scalar()) {
      positions.push_back(k);
    }
  }
  return {{"max_batch_size", config.max_batch_size}, {"scalar_outputs", positions}};
}

json run_vector(const std::string& suite, const json& vector) {
  try {
    if (suite == "input_shape") {
      try {
        return {{"shape", aoti_runner::parse_shape(vector.at("text").get<std::string>())}};
      } catch (const RunnerError& e) {
        return {{"message", e.what()}};
      }
    }
    if (suite == "check_plan") {
      const auto& options = vector.at("options");
      const auto number = [&](const char* key) {
        return options.contains(key) ? std::optional<double>(options.at(key).get<double>()) : std::nullopt;
      };
      const bool bitwise = options.value("bitwise", false);
      const auto max_ulp = options.contains("max_ulp") ? std::optional<int64_t>(options.at("max_ulp")) : std::nullopt;
      const bool overridden = bitwise || max_ulp || number("rtol") || number("atol");
      const auto override_rule =
          overridden ? std::optional(aoti_runner::tolerance_from_options(bitwise, max_ulp, number("rtol"),
                                                                         number("atol"), aoti_runner::Tolerance{}))
                     : std::nullopt;
      const auto recorded = vector.at("recorded").is_null() ? std::nullopt
                                                            : std::optional(tolerance_of(vector.at("recorded")));
      const auto& given = vector.at("given");
      const auto has = [&](const char* name) { return std::find(given.begin(), given.end(), name) != given.end(); };
      json plan = json::array();
      for (const auto& check : aoti_runner::plan_checks(has("expected"), has("eager"), vector.at("is_identity"),
                                                        recorded, override_rule)) {
        plan.push_back({{"check", check.name},
                        {"references", check.reference_name},
                        {"rule", aoti_runner::tolerance_to_document(check.tolerance)}});
      }
      return plan;
    }
    if (suite == "labels") {
      return aoti_runner::compared_labels(spec_of(vector), vector.at("reference").get<std::string>(),
                                          vector.at("count").get<size_t>());
    }
    if (suite == "cpu_budget") {
      const TemporaryTree tree(vector.at("files"));
      const int cpus = aoti_runner::usable_cpus(
          vector.at("affinity"), aoti_runner::cgroup_quota_cpus(vector.at("membership"), tree.root.string()));
      // The Triton backend's default: one CPU left to the server's own threads.
      return {{"cpus", cpus},
              {"intra_op_threads", aoti_runner::intra_op_threads_for(cpus, vector.at("server_instances"), 1)}};
    }
    if (suite == "triton_names") {
      if (vector.contains("spec")) {
        const auto spec = spec_of(vector);
        const auto names = [](const std::vector<aoti_runner::TensorSpec>& tensors, size_t count, const char* prefix) {
          json result = json::array();
          for (size_t i = 0; i < count; ++i) {
            result.push_back(aoti_triton::served_name(tensors, i, prefix));
          }
          return result;
        };
        return {{"inputs", names(spec.inputs, spec.inputs.size(), aoti_triton::kInputPrefix)},
                {"outputs", names(spec.outputs, vector.value("outputs_returned", spec.outputs.size()),
                                  aoti_triton::kOutputPrefix)}};
      }
      // The parameters as config.pbtxt holds them, read as the backend reads them.
      json parameters = json::object();
      for (const auto& [key, value] : vector.at("parameters").items()) {
        parameters[key] = {{"string_value", value}};
      }
      try {
        const auto config = aoti_triton::parse_model_config({{"name", "m"}, {"parameters", parameters}});
        const auto key = config.parameters.find("trusted_key");
        return {{"intra_op_threads", config.parameters.count("intra_op_threads")
                                         ? json(aoti_triton::intra_op_threads(config, 1, 1))
                                         : json(nullptr)},
                {"trusted_key", key == config.parameters.end() ? json(nullptr) : json(key->second)}};
      } catch (const RunnerError& e) {
        return {{"error", "refused"}, {"message", e.what()}};
      }
    }
    if (suite == "spec") {
      const auto spec = aoti_runner::spec_from_metadata(metadata_of(vector.at("metadata")), "vector");
      auto document = aoti_runner::spec_to_document(spec);
      document["schema_version"] = spec.schema_version;
      return {{"ok", document}};
    }
    if (suite == "preflight") {
      const auto spec = spec_of(vector);
      const auto& facts = vector.at("host");
      aoti_runner::HostFacts host;
      host.torch_version = facts.at("torch_version");
      host.machine = facts.at("machine");
      host.cpu_flags = facts.at("cpu_flags").get<std::set<std::string>>();
      host.cuda_available = facts.at("cuda_available");
      const auto ops = facts.value("ops", json::array());
      host.has_op = [ops](const aoti_runner::OpRef& op) {
        for (const auto& registered : ops) {
          if (registered.at("name") == op.name &&
              (!op.overload || registered.at("overload") == *op.overload)) {
            return true;
          }
        }
        return false;
      };
      const auto classes = facts.value("classes", std::vector<std::string>{});
      host.has_class = [classes](const std::string& cls) {
        return std::find(classes.begin(), classes.end(), cls) != classes.end();
      };
      aoti_runner::check_runs_here(spec, host);
      aoti_runner::check_required_symbols(spec, host);
      return "ok";
    }
    if (suite == "validation") {
      const auto spec = spec_of(vector);
      std::vector<aoti_runner::InputDesc> inputs;
      for (const auto& item : vector.at("inputs")) {
        aoti_runner::InputDesc desc;
        desc.dtype = item.at("dtype");
        desc.shape = item.at("shape").get<std::vector<int64_t>>();
        desc.device = item.value("device", "cpu");
        desc.layout = item.value("layout", "strided");
        if (item.contains("values")) {
          desc.values = item.at("values").get<std::vector<int64_t>>();
        }
        inputs.push_back(desc);
      }
      aoti_runner::check_inputs(inputs, spec);
      return "ok";
    }
    if (suite == "random") {
      const auto spec = spec_of(vector);
      std::optional<aoti_runner::Shapes> asked;
      if (vector.contains("input_shapes")) {
        asked = vector.at("input_shapes").get<aoti_runner::Shapes>();
      }
      json verdict = {{"shapes", aoti_runner::random_input_shapes(spec, asked)}};
      if (vector.contains("seed")) {
        json bits = json::array();
        for (const auto& tensor : aoti_runner::make_random_inputs(spec, vector.at("seed"), asked)) {
          bits.push_back(bits_of(tensor));
        }
        verdict["bits"] = bits;
      }
      return verdict;
    }
    if (suite == "comparison") {
      // The rule is written as the spec's eager_check entry.
      const auto tolerance = tolerance_of(vector.at("tolerance"));
      std::vector<aoti_runner::Comparison> comparisons;
      json details = json::array();
      const auto& actual = vector.at("actual");
      const auto& expected = vector.at("expected");
      for (size_t i = 0; i < actual.size(); ++i) {
        comparisons.push_back(
            aoti_runner::compare(tensor_of(actual[i]), tensor_of(expected[i]), tolerance));
        details.push_back(comparisons.back().rule() + ": " + comparisons.back().line());
      }
      const char* names[] = {"passed", "passed_within_tolerance", "failed"};
      return {{"verdict", names[static_cast<int>(aoti_runner::list_verdict(comparisons))]},
              {"verdict_line", aoti_runner::verdict_line(comparisons)},
              {"details", details}};
    }
    if (suite == "tolerances") {
      const auto dtype = aoti_runner::dtype_from_name(vector.at("name").get<std::string>());
      if (!dtype) {
        return {{"error", "unknown"}};
      }
      const auto [rtol, atol] = aoti_runner::default_tolerance(*dtype);
      return {{"rtol", rtol}, {"atol", atol}};
    }
    if (suite == "signatures") {
      // The signature file as the vector gives it: raw text, or a JSON document.
      const auto path = (std::filesystem::temp_directory_path() / "contract_vector_model.sig").string();
      {
        std::ofstream file(path, std::ios::binary | std::ios::trunc);
        file << (vector.contains("text") ? vector.at("text").get<std::string>() : vector.at("document").dump());
      }
      const auto manifest = aoti_runner::read_signature(path);
      std::filesystem::remove(path);
      if (vector.contains("on_disk")) {
        aoti_runner::check_signed_files(manifest, vector.at("on_disk").get<std::map<std::string, std::string>>(),
                                        "bundle");
      }
      json files = json::array();
      for (const auto& file : manifest.files) {
        files.push_back({file.name, file.sha256});
      }
      return {{"ok", {{"key_hint", manifest.key_hint}, {"files", files}}}};
    }
    if (suite == "archive_names") {
      return aoti_runner::zip_entry_name_problem(vector.at("entry").get<std::string>());
    }
    if (suite == "private_folders") {
      const auto owner = aoti_runner::private_folder_owner(vector.at("folder").get<std::string>());
      if (!owner) {
        return "refused";
      }
      const auto& processes = vector.at("processes");
      const auto pid = std::to_string(owner->pid);
      const auto stat_text =
          processes.contains(pid) ? std::optional<std::string>(processes.at(pid).get<std::string>()) : std::nullopt;
      return aoti_runner::owner_is_gone(*owner, stat_text) ? "gone" : "kept";
    }
    if (suite == "json_depth") {
      try {
        aoti_runner::parse_json_limited(vector.at("text").get<std::string>());
      } catch (const aoti_runner::JsonTextError& e) {
        return std::string(e.what()).find("levels deep") != std::string::npos ? "too_deep" : "not_json";
      }
      return "ok";
    }
    if (suite == "batching") {
      // The config triton_repository would write to batch the package (max_batch_size
      // the batch dim's upper bound, dims without dim 0, a tensor that is only its batch
      // dim as dims [1] with reshape []), as the JSON Triton hands the backend (int64 dims
      // as strings; an empty reshape shape left out), read and checked by the backend.
      // A package with a Python scalar output is never batched: its config is the full
      // shapes, each scalar output dims [1], and the verdict names them. A hand_written
      // vector with drop_reshape leaves the batch reshape out; with scalar_dims, it
      // declares the scalar outputs so instead.
      const auto spec = spec_of(vector);
      const bool drop_reshape = vector.value("drop_reshape", false);
      const auto verdict = batched_verdict(spec, drop_reshape);
      const bool scalars = std::any_of(spec.outputs.begin(), spec.outputs.end(),
                                       [](const aoti_runner::TensorSpec& t) { return t.is_scalar(); });
      return verdict == json("not_batched") && scalars
                 ? scalar_verdict(spec, vector.value("scalar_dims", json::array({"1"})))
                 : verdict;
    }
    if (suite == "triton_types") {  // the core table's Triton type, as the aoti backend uses it
      const auto name = vector.at("name").get<std::string>();
      const auto type = aoti_runner::triton_type(name);
      const auto config_type = aoti_triton::config_type_of(name);
      if (!type) {
        if (config_type || aoti_triton::server_type_of(name) != TRITONSERVER_TYPE_INVALID) {
          return {{"error", "the backend has a type the table does not"}};
        }
        return nullptr;
      }
      // config.pbtxt's TYPE_FP32 is FP32 on the wire; the server enum must be the same type.
      if (!config_type || *config_type != "TYPE_" + *type ||
          aoti_triton::dtype_of(aoti_triton::server_type_of(name)) != name ||
          aoti_runner::dtype_of_triton_type(*type) != name) {
        return {{"error", "the backend's type disagrees with the table's"}};
      }
      return *type;
    }
    if (suite == "dtypes") {
      const auto name = vector.at("name").get<std::string>();
      const auto dtype = aoti_runner::dtype_from_name(name);
      if (!dtype) {
        return {{"error", "unknown"}};
      }
      return {{"name", aoti_runner::dtype_name(*dtype)}, {"scalar_type", c10::toString(*dtype)}};
    }
  } catch (const RunnerError& e) {
    return {{"error", e.kind()}, {"message", e.what()}};
  }
  throw std::invalid_argument("unknown suite " + suite);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: contract_vectors SUITE FILE, SUITE one of spec, preflight, validation, random, comparison, "
                 "tolerances, dtypes, signatures, batching, triton_types, triton_names, archive_names, json_depth, "
                 "input_shape, check_plan, labels, cpu_budget\n";
    return 2;
  }
  try {
    std::ifstream file(argv[2]);
    const auto vectors = json::parse(file);
    json results = json::object();
    for (const auto& vector : vectors.at("vectors")) {
      results[vector.at("name").get<std::string>()] = run_vector(argv[1], vector);
    }
    if (std::string(argv[1]) == "dtypes") {
      results["__table__"] = aoti_runner::dtype_names();
    }
    std::cout << results.dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "contract_vectors: error: " << e.what() << "\n";
    return 2;
  }
}
