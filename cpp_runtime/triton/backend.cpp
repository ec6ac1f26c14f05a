// libtriton_aoti.so: the Triton Inference Server backend "aoti", which serves AOTI
// packages with their custom op libraries. A model version directory is a deploy
// bundle (model.pt2, the op libraries its spec records, optionally model.sig), opened
// with the runner core exactly as aoti_runner opens one: trust policy, preflight, op
// libraries, then one AOTIModelPackageLoader per model and device, with a runner for
// each of its instances there, lent from the runner core's loader pool.
#include "aoti_package.h"
#include "bundle.h"
#include "cpu_budget.h"
#include "errors.h"
#include "malloc_policy.h"
#include "model_config.h"
#include "private_folder.h"
#include "request_tensors.h"
#include "server_calls.h"
#include "triton_api.h"
#include "validation.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace aoti_triton {
namespace {

using aoti_runner::RunnerError;

// Set once by TRITONBACKEND_Initialize, before any model loads.
BackendSettings g_settings;
int g_cpus = 1;  // usable_cpus(): the affinity mask and cgroup quota of the server

// Every instance of every model loaded now: the CPU budget is shared out among them.
std::atomic<int64_t> g_server_instances{0};

// Models load on parallel threads; the op libraries' registration, the trust policy's
// environment and the preflight's view of the dispatcher are process-wide.
std::mutex g_load_mutex;

// `owned`: the caller must delete the message (a model's config), or Triton keeps it
// (the backend config).
nlohmann::json message_json(TRITONSERVER_Message* message, bool owned, const std::string& what) {
  const char* base = nullptr;
  size_t size = 0;
  auto* error = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  auto parsed = error == nullptr ? nlohmann::json::parse(base, base + size, nullptr, /*allow_exceptions=*/false)
                                 : nlohmann::json();
  if (owned) {
    if (auto* delete_error = TRITONSERVER_MessageDelete(message)) {
      TRITONSERVER_ErrorDelete(delete_error);
    }
  }
  check(error, what);
  if (parsed.is_discarded()) {
    throw RunnerError(what + ": Triton's JSON did not parse.");
  }
  return parsed;
}

struct ModelState {
  std::string name;
  uint64_t version = 0;
  ModelConfig config;
  aoti_runner::OpenedModel model;  // keeps a verified private copy alive
  bool counted = false;            // its instances are in g_server_instances
  // One loader per device index (-1: the CPU), built or reused by the device's first
  // instance, with a runner for each instance there; instances share it (run() is
  // thread-safe across runners). Released after every instance is finalized.
  std::mutex loaders_mutex;
  std::map<int, aoti_runner::LoaderLease> loaders;
  // Test-only (the test_fault parameter): where execute throws on purpose.
  std::string test_fault;

  ~ModelState() {
    if (counted) {
      g_server_instances -= config.instance_count;
    }
  }
};

// The trust policy: the server's --backend-config key, else $AOTI_DEPLOY_TRUSTED_KEY,
// else the model's trusted_key parameter. A model's config can add a key, never drop one.
aoti_runner::TrustPolicy model_policy(const ModelConfig& config) {
  if (!g_settings.trusted_key.empty()) {
    return {g_settings.trusted_key, "--backend-config=aoti,trusted-key", false};
  }
  auto policy = aoti_runner::trust_policy("", false);
  if (policy.trusted_key.empty()) {
    if (const auto it = config.parameters.find("trusted_key"); it != config.parameters.end()) {
      policy = {it->second, "the trusted_key parameter of config.pbtxt", false};
    }
  }
  return policy;
}

std::unique_ptr<ModelState> load_model(TRITONBACKEND_Model* model) {
  auto state = std::make_unique<ModelState>();
  const char* name = nullptr;
  check(TRITONBACKEND_ModelName(model, &name), "reading the model's name");
  state->name = name;
  check(TRITONBACKEND_ModelVersion(model, &state->version), "reading the model's version");
  auto artifact = TRITONBACKEND_ARTIFACT_FILESYSTEM;
  const char* location = nullptr;
  check(TRITONBACKEND_ModelRepository(model, &artifact, &location), "reading the model's repository");
  if (artifact != TRITONBACKEND_ARTIFACT_FILESYSTEM) {
    throw RunnerError("the aoti backend reads models from a local file system only.");
  }
  TRITONSERVER_Message* config_message = nullptr;
  check(TRITONBACKEND_ModelConfig(model, 1, &config_message), "reading config.pbtxt");
  state->config = parse_model_config(message_json(config_message, true, "reading config.pbtxt"));

  const auto version_dir = std::string(location) + "/" + std::to_string(state->version);
  std::lock_guard<std::mutex> lock(g_load_mutex);
  // With a trusted key the bundle is copied and verified first: nothing native of it
  // runs before that, as in aoti_runner.
  state->model = aoti_runner::open_model(version_dir, model_policy(state->config));
  const auto& spec = state->model.spec;
  // Everything the config can refuse is refused before any op library loads: a library
  // stays registered in the process after a failed load.
  check_config_against_spec(state->config, spec);
  // A bad intra_op_threads parameter is refused here, not on the first request.
  const int threads = intra_op_threads(state->config, g_cpus, g_server_instances + state->config.instance_count);
  if (const auto it = state->config.parameters.find("test_fault"); it != state->config.parameters.end()) {
    state->test_fault = it->second;
  }
  aoti_runner::prepare_package(spec, state->model.op_libraries);

  std::string libraries;
  for (const auto& library : state->model.op_libraries) {
    libraries.append(libraries.empty() ? "" : ", ").append(library.name);
  }
  log(TRITONSERVER_LOG_INFO,
      "model " + state->name + " version " + std::to_string(state->version) + ": " +
          (state->model.status.empty() ? "unsigned bundle" : state->model.status) + "; op libraries: " +
          (libraries.empty() ? "none" : libraries) + "; max_batch_size " +
          std::to_string(state->config.max_batch_size) + "; " + std::to_string(state->config.instance_count) +
          " instance(s); " + std::to_string(threads) + " intra-op thread(s) per instance (" +
          (state->config.parameters.count("intra_op_threads") ? "the intra_op_threads parameter"
                                                               : "of " + std::to_string(g_cpus) +
                                                                     " usable CPU(s), with every loaded instance") +
          ")",
      __LINE__);
  if (const auto note = aoti_runner::thread_count_note(spec.intra_op_threads, threads); !note.empty()) {
    log(TRITONSERVER_LOG_WARN,
        "model " + state->name + ": " + note + " Or set the model's intra_op_threads parameter to " +
            std::to_string(spec.intra_op_threads) + ".",
        __LINE__);
  }
  return state;
}

struct InstanceState {
  ModelState* model = nullptr;
  std::string name;
  c10::Device device{c10::DeviceType::CPU};
  torch::inductor::AOTIModelPackageLoader* loader = nullptr;  // the model's, for this device
};

std::unique_ptr<InstanceState> load_instance(TRITONBACKEND_ModelInstance* instance) {
  auto state = std::make_unique<InstanceState>();
  const char* name = nullptr;
  check(TRITONBACKEND_ModelInstanceName(instance, &name), "reading the instance's name");
  state->name = name;
  TRITONBACKEND_Model* model = nullptr;
  check(TRITONBACKEND_ModelInstanceModel(instance, &model), "reading the instance's model");
  void* model_state = nullptr;
  check(TRITONBACKEND_ModelState(model, &model_state), "reading the model's state");
  if (model_state == nullptr) {
    throw RunnerError("the model did not load, so its instance " + state->name + " cannot start.");
  }
  state->model = static_cast<ModelState*>(model_state);
  // The instance kind was checked against the package's device with the config; a GPU
  // instance runs on the device Triton gave it.
  const bool gpu = c10::Device(state->model->model.spec.device).is_cuda();
  int32_t device_id = 0;
  if (gpu) {
    check(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id), "reading the instance's device");
    state->device = c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_id));
  }
  auto& owner = *state->model;
  const int device_index = gpu ? device_id : -1;
  std::lock_guard<std::mutex> lock(owner.loaders_mutex);
  auto it = owner.loaders.find(device_index);
  if (it == owner.loaders.end()) {
    const auto runners = instances_on_device(owner.config, gpu, device_id);
    auto lease = aoti_runner::lease_package_loader(owner.model.package, static_cast<size_t>(runners), device_index,
                                                   owner.model.package_sha256, owner.model.package_shown);
    const auto pool = aoti_runner::loader_pool_size();
    log(TRITONSERVER_LOG_INFO,
        "model " + owner.name + " version " + std::to_string(owner.version) + ": " +
            (lease.reused() ? "reused the loader of an earlier load of the same package" : "built a loader") +
            " with " + std::to_string(runners) + " runner(s) on " + (gpu ? state->device.str() : "the CPU") +
            "; the process holds " + std::to_string(pool.loaders) + " loader(s), " + std::to_string(pool.lent) +
            " in use",
        __LINE__);
    it = owner.loaders.emplace(device_index, std::move(lease)).first;
  }
  state->loader = &it->second.loader();
  return state;
}

// Intra-op threads are the calling thread's (OpenMP's team size), but set_num_threads
// also sets a process-wide default that a thread's first parallel region adopts: so
// checked on every execute, on Triton's execution thread of the instance. The count
// follows the server's instances as models load and unload.
void use_intra_op_threads(const ModelState& model) {
  const int threads = intra_op_threads(model.config, g_cpus, g_server_instances.load());
  if (at::get_num_threads() != threads) {
    at::set_num_threads(threads);
  }
}

// The test_fault parameter (test-only): throws at the named step of execute.
void inject_test_fault(const ModelState& model, const char* step) {
  if (model.test_fault == step) {
    throw RunnerError(std::string("injected test fault at ") + step + " (the test_fault parameter)");
  }
}

// A request cancelled (its gRPC client gave up) is answered CANCELLED instead of run.
// Triton 2.51's default scheduler hands cancelled requests to the backend like any
// other, whether they were cancelled in its queue or after. A failed query counts as
// not cancelled.
bool request_cancelled(TRITONBACKEND_Request* request) noexcept {
  bool cancelled = false;
  if (auto* error = TRITONBACKEND_RequestIsCancelled(request, &cancelled)) {
    TRITONSERVER_ErrorDelete(error);
    return false;
  }
  return cancelled;
}

struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  std::optional<std::string> error;  // this request's failure, sent in place of outputs
  TRITONSERVER_Error_Code code = TRITONSERVER_ERROR_INVALID_ARG;  // INTERNAL: the run failed
  std::vector<at::Tensor> inputs;
  int64_t batch = 1;
  uint64_t compute_start_ns = 0;
  uint64_t compute_end_ns = 0;
};

// Requests that can run as one: with a batch dim, those whose inputs agree in every
// dim but dim 0 (one group per shape, in arrival order); otherwise one per request.
std::vector<std::vector<Pending*>> group_requests(std::vector<Pending>& pending, bool batched) {
  std::vector<std::vector<Pending*>> groups;
  std::map<std::vector<std::vector<int64_t>>, size_t> by_shape;
  for (auto& item : pending) {
    if (item.error) {
      continue;
    }
    if (!batched) {
      groups.push_back({&item});
      continue;
    }
    std::vector<std::vector<int64_t>> key;
    for (const auto& tensor : item.inputs) {
      key.push_back(tensor.sizes().slice(1).vec());
    }
    const auto [it, added] = by_shape.emplace(key, groups.size());
    if (added) {
      groups.emplace_back();
    }
    groups[it->second].push_back(&item);
  }
  return groups;
}

void run_group(InstanceState& instance, const std::vector<Pending*>& group, bool batched,
               TRITONBACKEND_ModelInstance* triton_instance, uint64_t exec_start_ns) {
  const auto& spec = instance.model->model.spec;
  std::vector<at::Tensor> inputs;
  int64_t total = 0;
  for (auto* item : group) {
    total += item->batch;
  }
  const uint64_t compute_start = now_ns();
  std::vector<at::Tensor> outputs;
  std::optional<std::string> failure;
  try {
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (group.size() == 1) {
        inputs.push_back(group.front()->inputs[i]);
        continue;
      }
      std::vector<at::Tensor> parts;
      for (auto* item : group) {
        parts.push_back(item->inputs[i]);
      }
      inputs.push_back(at::cat(parts, 0));
    }
    if (group.size() > 1) {  // each request passed alone; the merged batch must too
      std::vector<aoti_runner::InputDesc> merged;
      for (const auto& tensor : inputs) {
        merged.push_back(aoti_runner::describe_input(tensor));
      }
      aoti_runner::check_inputs(merged, spec);
    }
    outputs = instance.loader->run(inputs);
    if (batched) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (outputs[k].dim() == 0 || outputs[k].size(0) != total) {
          throw RunnerError(served_name(spec.outputs, k, kOutputPrefix) + " has shape " +
                            aoti_runner::format_sizes(outputs[k]) + ", whose dim 0 is not the batch of " +
                            std::to_string(total) +
                            ": the package's outputs do not follow its batch dim. Set max_batch_size: 0 "
                            "in config.pbtxt, with the full shapes as dims.");
        }
      }
    }
  } catch (...) {
    failure = "running the AOTI package failed: " + describe_current_exception();
  }
  if (failure && group.size() > 1) {
    // A request whose index is out of range passes validation and fails inside the run
    // (the package's index checks), taking the merged batch with it: each request of
    // the batch runs again alone, so only the bad one gets the error.
    for (auto* item : group) {
      run_group(instance, {item}, batched, triton_instance, exec_start_ns);
    }
    return;
  }
  const uint64_t compute_end = now_ns();
  int64_t first = 0;
  for (auto* item : group) {
    item->compute_start_ns = compute_start;
    item->compute_end_ns = compute_end;
    if (failure) {
      item->error = failure;
      // The package's index checks (compiler/index_guards.py) start their messages
      // with this: the request is bad, not the server.
      item->code = failure->find(": index out of range: ") != std::string::npos ? TRITONSERVER_ERROR_INVALID_ARG
                                                                                  : TRITONSERVER_ERROR_INTERNAL;
      continue;
    }
    try {
      write_response_outputs(item->request, item->response, spec, outputs, batched, first, item->batch);
    } catch (...) {
      item->error = describe_current_exception();
    }
    first += item->batch;
  }
  if (!failure) {
    const uint64_t exec_end = now_ns();
    if (auto* error = TRITONBACKEND_ModelInstanceReportBatchStatistics(
            triton_instance, static_cast<uint64_t>(total), exec_start_ns, compute_start, compute_end, exec_end)) {
      log(TRITONSERVER_LOG_ERROR, std::string("reporting batch statistics: ") + TRITONSERVER_ErrorMessage(error));
      TRITONSERVER_ErrorDelete(error);
    }
  }
}

// Gives a request that was cancelled its CANCELLED error (it is then not run); true if so.
bool mark_if_cancelled(Pending& item, const std::string& model) {
  if (item.error || !request_cancelled(item.request)) {
    return false;
  }
  item.error = "the request was cancelled before model " + model + " ran it";
  item.code = TRITONSERVER_ERROR_CANCELLED;
  item.inputs.clear();
  log(TRITONSERVER_LOG_INFO, *item.error + "; answered CANCELLED", __LINE__);
  return true;
}

// Reads every request and runs them in groups. May throw anywhere: whatever it left
// unfinished, answer_and_release then answers.
void execute(TRITONBACKEND_ModelInstance* triton_instance, InstanceState& instance, std::vector<Pending>& pending,
             uint64_t exec_start) {
  const auto& model = *instance.model;
  use_intra_op_threads(model);
  const bool batched = model.config.max_batch_size > 0;
  const auto& spec = model.model.spec;
  for (auto& item : pending) {
    if (auto* error = TRITONBACKEND_ResponseNew(&item.response, item.request)) {
      log(TRITONSERVER_LOG_ERROR, std::string("creating a response: ") + TRITONSERVER_ErrorMessage(error));
      TRITONSERVER_ErrorDelete(error);
      item.response = nullptr;
      item.error = "no response could be created";
      continue;
    }
    if (mark_if_cancelled(item, model.name)) {
      continue;
    }
    try {
      item.inputs = read_request_inputs(item.request, spec, instance.device);
      if (batched) {
        item.batch = item.inputs.front().size(0);
      }
    } catch (...) {
      item.error = "invalid request for model " + model.name + ": " + describe_current_exception();
    }
  }
  inject_test_fault(model, "before_run");
  if (model.config.test_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(model.config.test_delay_ms));
  }
  // Asked again just before running: reading a large batch takes time.
  for (auto& item : pending) {
    mark_if_cancelled(item, model.name);
  }
  for (const auto& group : group_requests(pending, batched)) {
    run_group(instance, group, batched, triton_instance, exec_start);
  }
  if (instance.device.is_cuda()) {
    // Copies into and out of device buffers are asynchronous: done before a response
    // is sent or a request's buffers are released.
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->synchronizeDevice(instance.device.index());
  }
  // Where a failed device synchronize would throw: after every group wrote its outputs.
  inject_test_fault(model, "after_run");
}

// Sends each request's response and releases the request, exactly once each. When
// execute did not finish (`failed`), every request without its own error gets
// `failure`: one whose outputs were written may still have been hit (a device error
// fails every request of the batch), so none of them is sent as a success. Never
// throws: a step that fails becomes the request's error, and it is still released.
void answer_and_release(TRITONBACKEND_ModelInstance* triton_instance, const ModelState& model,
                        std::vector<Pending>& pending, uint64_t exec_start, bool failed,
                        const std::string& failure) noexcept {
  const uint64_t exec_end = now_ns();
  for (auto& item : pending) {
    bool ok = !failed && !item.error;
    try {
      if (failed && !item.error && !failure.empty()) {
        item.error = failure;
        item.code = TRITONSERVER_ERROR_INTERNAL;
      }
      // Inputs may point into the request's buffers: dropped before it is released.
      item.inputs.clear();
      inject_test_fault(model, "answering");
      // Statistics before the response: a client that reads them after its answer sees
      // its own request counted.
      const uint64_t compute_start = item.compute_start_ns ? item.compute_start_ns : exec_end;
      const uint64_t compute_end = item.compute_end_ns ? item.compute_end_ns : exec_end;
      if (auto* error = TRITONBACKEND_ModelInstanceReportStatistics(triton_instance, item.request, ok, exec_start,
                                                                    compute_start, compute_end, exec_end)) {
        TRITONSERVER_ErrorDelete(error);
      }
    } catch (...) {
      ok = false;
      try {
        item.error = "answering the request failed: " + describe_current_exception();
        item.code = TRITONSERVER_ERROR_INTERNAL;
        log(TRITONSERVER_LOG_ERROR, "model " + model.name + ": " + *item.error, __LINE__);
      } catch (...) {
        item.error.reset();  // no memory for a message: the fixed one below
      }
    }
    if (item.response != nullptr) {
      TRITONSERVER_Error* error = nullptr;
      if (!ok) {
        error = item.error ? TRITONSERVER_ErrorNew(item.code, item.error->c_str())
                           : TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the aoti backend failed");
      }
      if (auto* send_error = TRITONBACKEND_ResponseSend(item.response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error)) {
        log_message(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(send_error), __LINE__);
        TRITONSERVER_ErrorDelete(send_error);
      }
      if (error != nullptr) {
        TRITONSERVER_ErrorDelete(error);  // ResponseSend does not take ownership
      }
      item.response = nullptr;
    }
    if (auto* error = TRITONBACKEND_RequestRelease(item.request, TRITONSERVER_REQUEST_RELEASE_ALL)) {
      log_message(TRITONSERVER_LOG_ERROR, TRITONSERVER_ErrorMessage(error), __LINE__);
      TRITONSERVER_ErrorDelete(error);
    }
  }
}

// Answers and releases requests that never got a Pending (only when even that
// allocation failed): an error response each, with no allocation of ours.
void fail_untracked(TRITONBACKEND_Request** requests, uint32_t from, uint32_t count) noexcept {
  for (uint32_t r = from; r < count; ++r) {
    TRITONBACKEND_Response* response = nullptr;
    if (TRITONSERVER_Error* error = TRITONBACKEND_ResponseNew(&response, requests[r])) {
      TRITONSERVER_ErrorDelete(error);
    } else {
      auto* why = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the aoti backend ran out of memory");
      if (auto* send_error = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, why)) {
        TRITONSERVER_ErrorDelete(send_error);
      }
      if (why != nullptr) {
        TRITONSERVER_ErrorDelete(why);
      }
    }
    if (auto* error = TRITONBACKEND_RequestRelease(requests[r], TRITONSERVER_REQUEST_RELEASE_ALL)) {
      TRITONSERVER_ErrorDelete(error);
    }
  }
}

// Hands a loaded state to the Triton object that keeps it until its Finalize.
template <typename Object, typename State>
void hand_state(TRITONSERVER_Error* (*set)(Object*, void*), Object* object, std::unique_ptr<State> state,
                const char* what) {
  check(set(object, state.get()), what);
  state.release();
}

// Deletes the state a Triton object keeps: none when its Initialize failed.
template <typename State, typename Object>
void delete_state(TRITONSERVER_Error* (*get)(Object*, void**), Object* object, const char* what) {
  void* state = nullptr;
  check(get(object, &state), what);
  delete static_cast<State*>(state);
}

}  // namespace
}  // namespace aoti_triton

using namespace aoti_triton;

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return guarded(TRITONSERVER_ERROR_UNSUPPORTED, [&] {
    uint32_t major = 0;
    uint32_t minor = 0;
    check(TRITONBACKEND_ApiVersion(&major, &minor), "reading the TRITONBACKEND API version");
    if (major != kTritonBackendApiMajor || minor < kTritonBackendApiMinor) {
      throw RunnerError("the aoti backend was built for TRITONBACKEND API " + std::to_string(kTritonBackendApiMajor) +
                        "." + std::to_string(kTritonBackendApiMinor) + " (Triton 2.51 or newer with API major " +
                        std::to_string(kTritonBackendApiMajor) + "), but this server has " + std::to_string(major) +
                        "." + std::to_string(minor) + ". Use a Triton server of a matching release.");
    }
    TRITONSERVER_Message* config = nullptr;
    check(TRITONBACKEND_BackendConfig(backend, &config), "reading the backend config");
    g_settings = parse_backend_config(message_json(config, false, "reading the backend config"));
    g_cpus = aoti_runner::usable_cpus();
    aoti_runner::apply_malloc_policy(g_settings.malloc_policy);
    log(TRITONSERVER_LOG_INFO,
        "aoti backend: TRITONBACKEND API " + std::to_string(major) + "." + std::to_string(minor) + ", " +
            aoti_runner::describe_malloc_policy(g_settings.malloc_policy) + ", " + std::to_string(g_cpus) +
            " usable CPU(s)" +
            (g_settings.trusted_key.empty() ? "" : ", every bundle verified with " + g_settings.trusted_key),
        __LINE__);
  });
}

TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend*) {
  // Every model is finalized by now: the pooled loaders go, and their extracted files.
  return guarded(TRITONSERVER_ERROR_INTERNAL, [] { aoti_runner::drop_free_loaders(); });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return guarded(TRITONSERVER_ERROR_INVALID_ARG, [&] {
    // What servers killed while loading left in $TMPDIR (their owners are gone) goes first.
    aoti_runner::remove_orphaned_private_folders();
    auto state = load_model(model);
    g_server_instances += state->config.instance_count;
    state->counted = true;  // and uncounted by its destructor, should Triton not take it
    hand_state(TRITONBACKEND_ModelSetState, model, std::move(state), "storing the model's state");
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  // Called even when ModelInitialize failed, with no state set.
  return guarded(TRITONSERVER_ERROR_INTERNAL, [&] {
    delete_state<ModelState>(TRITONBACKEND_ModelState, model, "reading the model's state");
    // What the model's threads freed goes back to the system: reloads stay flat.
    aoti_runner::release_free_memory();
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return guarded(TRITONSERVER_ERROR_INVALID_ARG, [&] {
    hand_state(TRITONBACKEND_ModelInstanceSetState, instance, load_instance(instance),
               "storing the instance's state");
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  // Called even when ModelInstanceInitialize failed, with no state set.
  return guarded(TRITONSERVER_ERROR_INTERNAL, [&] {
    delete_state<InstanceState>(TRITONBACKEND_ModelInstanceState, instance, "reading the instance's state");
  });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* instance,
                                                       TRITONBACKEND_Request** requests,
                                                       const uint32_t request_count) {
  // Every request gets its response and is released here, on every path; an error
  // returned would hand the requests back to Triton, so only a missing state returns one.
  void* state = nullptr;
  if (auto* error = TRITONBACKEND_ModelInstanceState(instance, &state)) {
    return error;
  }
  if (state == nullptr) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the aoti model instance has no state");
  }
  auto& instance_state = *static_cast<InstanceState*>(state);
  const uint64_t exec_start = now_ns();
  std::vector<Pending> pending;
  bool failed = false;
  std::string failure;
  try {
    pending.resize(request_count);
    for (uint32_t r = 0; r < request_count; ++r) {
      pending[r].request = requests[r];
    }
    execute(instance, instance_state, pending, exec_start);
  } catch (...) {
    failed = true;
    try {
      failure = "executing the batch failed: " + describe_current_exception();
      log(TRITONSERVER_LOG_ERROR, "model " + instance_state.model->name + ": " + failure, __LINE__);
    } catch (...) {
      failure.clear();  // no memory for a message: answer_and_release sends a fixed one
    }
  }
  answer_and_release(instance, *instance_state.model, pending, exec_start, failed, failure);
  fail_untracked(requests, static_cast<uint32_t>(pending.size()), request_count);
  return nullptr;
}

}  // extern "C"
