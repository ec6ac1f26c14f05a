// Implementation of the serving benchmark (see bench.h).
#include "bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "aoti_package.h"
#include "cpu_budget.h"
#include "errors.h"

namespace aoti_runner {

int64_t resident_set_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream words(line.substr(6));
      int64_t kib = 0;
      words >> kib;
      return kib;
    }
  }
  return -1;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) {
    return std::nan("");
  }
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::min(values.size() - 1, rank == 0 ? 0 : rank - 1)];
}

namespace {

bool same_bits(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].cpu().contiguous();
    const auto y = b[i].cpu().contiguous();
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) {
      return false;
    }
  }
  return true;
}

// Pins the calling thread to one CPU of those this process may use: serving thread t
// to the t-th (modulo their count), so two serving threads never share a core.
void pin_to_cpu(int t) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return;
  }
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) {
      cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) {
    return;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[static_cast<size_t>(t) % cpus.size()], &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

// The whole process's minor faults so far, every thread's (the OpenMP workers too),
// terminated threads included. RUSAGE_THREAD would miss the intra-op workers, which
// touch most of the pages when a run is parallel.
int64_t process_minor_faults() noexcept {
  struct rusage usage {};
  return getrusage(RUSAGE_SELF, &usage) == 0 ? static_cast<int64_t>(usage.ru_minflt) : 0;
}

// The CUDA device a package computes on, if any of its inputs or outputs lives there.
std::optional<c10::DeviceIndex> cuda_device_of(const std::vector<at::Tensor>& inputs,
                                               const std::vector<at::Tensor>& outputs) {
  for (const auto* tensors : {&inputs, &outputs}) {
    for (const auto& tensor : *tensors) {
      if (tensor.defined() && tensor.is_cuda()) {
        return tensor.device().index();
      }
    }
  }
  return std::nullopt;
}

// Called inside a timer before it stops. On a CUDA package, AOTI's run (like copy_)
// returns once the kernels are queued, so without this the timer would measure the
// launches only. On the CPU there is nothing to wait for and nothing is called.
// It waits for the whole device: with several serving threads on one GPU, a run's
// time can hold another thread's kernels, as it does when they share the GPU anyway.
// Compile-only here: the development and CI machines have no GPU, so this CUDA path
// builds against the CPU torch but has never run.
void wait_for_device(const std::optional<c10::DeviceIndex>& cuda) {
  if (cuda) {
    torch::cuda::synchronize(*cuda);
  }
}

// Runs before timing that choose the intra-op thread count, per candidate and round.
constexpr int kChoiceRounds = 3;

// The default intra-op thread count, chosen by the package's work, not its input size:
// a memory-bound package (the IdentityModel at 0.6 MB) ran slower and bimodal with two
// threads on a 2-vCPU VM, while a compute-bound one (a float16 CNN at batch 32) ran 1.5x
// faster. So the package is timed, on this thread, at 1 and at cores / threads intra-op
// threads, in alternating blocks (the first run of each block, after a change of team
// size, is not counted), and the faster median is kept. Sets result.intra_op_threads,
// intra_op_choice (why) and intra_op_trial.
void choose_intra_op_threads(torch::inductor::AOTIModelPackageLoader& loader,
                             const std::vector<at::Tensor>& inputs, const BenchOptions& options,
                             int cores, const std::optional<c10::DeviceIndex>& cuda,
                             BenchResult& result) {
  std::ostringstream why;
  if (options.intra_op_threads > 0) {
    result.intra_op_threads = options.intra_op_threads;
    result.intra_op_choice = "set with --intra-op-threads";
    return;
  }
  const int many = intra_op_threads_for(cores, options.threads);
  if (many == 1) {
    why << "cores / serving threads = " << cores << " / " << options.threads
        << ", so 1: nothing to choose from";
    result.intra_op_threads = 1;
    result.intra_op_choice = why.str();
    return;
  }
  const int64_t per_block = std::max<int64_t>(3, options.warmup / (2 * kChoiceRounds));
  std::vector<double> one, all;
  for (int round = 0; round < kChoiceRounds; ++round) {
    for (const int threads : {1, many}) {
      at::set_num_threads(threads);
      for (int64_t i = 0; i < per_block; ++i) {
        const auto begin = std::chrono::steady_clock::now();
        loader.run(inputs);
        wait_for_device(cuda);
        const auto end = std::chrono::steady_clock::now();
        if (i > 0) {
          (threads == 1 ? one : all).push_back(std::chrono::duration<double, std::micro>(end - begin).count());
        }
      }
    }
  }
  const double p50_one = percentile(one, 50);
  const double p50_many = percentile(all, 50);
  why << std::fixed << std::setprecision(1) << "the faster, timed before the warm-up: 1 thread p50 "
      << p50_one << " us, " << many << " threads (cores / serving threads) p50 " << p50_many << " us, "
      << one.size() << " runs each";
  result.intra_op_threads = p50_many < p50_one ? many : 1;
  result.intra_op_choice = why.str();
  result.intra_op_trial = {{1, p50_one}, {many, p50_many}};
}

// JSON has no NaN or infinity: such a value (e.g. a percentile of nothing) is null.
std::string json_number(double value) {
  if (!std::isfinite(value)) {
    return "null";
  }
  std::ostringstream out;
  out << std::setprecision(6) << value;
  return out.str();
}

// One step of the floor: destination.copy_(source), into a buffer made before timing.
struct FloorCopy {
  at::Tensor destination;
  at::Tensor source;
};

// The copies the floor times, and which floor that is (result.floor and its counts).
//  - The identity floor: four copy_ calls through buffers, the least a 4-layer identity
//    must do, since custom ops cannot fuse.
//  - Any other package: every input and every output copied once, the least any
//    package must move to read its inputs and write its outputs.
//  - No floor when there is no byte to move (e.g. a package with no inputs and no
//    outputs): a ratio to copying nothing would mean nothing.
std::vector<FloorCopy> plan_floor(Floor wanted, const std::vector<at::Tensor>& inputs,
                                  const std::vector<at::Tensor>& outputs, BenchResult& result) {
  std::vector<FloorCopy> copies;
  result.floor = Floor::kNone;
  if (wanted == Floor::kNone) {
    return copies;
  }
  // An identity package has one input; with any other count the generic floor is
  // the one that means something.
  if (wanted == Floor::kIdentityFourCopies && inputs.size() == 1) {
    const auto& x = inputs.front();
    at::Tensor previous = x;
    for (int i = 0; i < 4; ++i) {
      auto buffer = at::empty_like(x);
      copies.push_back({buffer, previous});
      previous = buffer;
    }
    result.floor = Floor::kIdentityFourCopies;
    return copies;
  }
  int64_t bytes = 0;
  for (const auto* tensors : {&inputs, &outputs}) {
    for (const auto& tensor : *tensors) {
      bytes += static_cast<int64_t>(tensor.nbytes());
      copies.push_back({at::empty_like(tensor), tensor});
    }
  }
  if (bytes == 0) {
    copies.clear();
    return copies;
  }
  result.floor = Floor::kCopyInputsOutputs;
  result.floor_inputs = inputs.size();
  result.floor_outputs = outputs.size();
  return copies;
}

std::vector<double> time_floor(const std::vector<FloorCopy>& copies, const BenchOptions& options,
                               const std::optional<c10::DeviceIndex>& cuda) {
  std::vector<double> latencies;
  if (copies.empty()) {
    return latencies;
  }
  latencies.reserve(static_cast<size_t>(options.iterations));
  for (int64_t i = 0; i < options.warmup + options.iterations; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    for (const auto& copy : copies) {
      copy.destination.copy_(copy.source);
    }
    wait_for_device(cuda);
    const auto end = std::chrono::steady_clock::now();
    if (i >= options.warmup) {
      latencies.push_back(std::chrono::duration<double, std::micro>(end - begin).count());
    }
  }
  return latencies;
}

// The floor's name in the JSON.
const char* floor_name(Floor floor) {
  switch (floor) {
    case Floor::kIdentityFourCopies:
      return "identity: 4 copies";
    case Floor::kCopyInputsOutputs:
      return "inputs and outputs: each copied once";
    case Floor::kNone:
      break;
  }
  return "none";
}

}  // namespace

BenchResult bench_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                          const BenchOptions& options, const std::string& shown,
                          std::shared_ptr<UnpackedPackage> unpacked) {
  if (options.iterations < 1 || options.threads < 1 || options.warmup < 0) {
    throw RunnerError("--bench needs at least 1 iteration and 1 thread.");
  }
  BenchResult result;
  result.options = options;
  const int cores = usable_cpus();
  result.rss_start_kib = resident_set_kib();

  PackageLoader loader;
  std::vector<at::Tensor> reference;
  // One loader, one runner per serving thread: run() lends each call a free runner.
  loader = load_package(path, static_cast<size_t>(options.threads), -1, shown, std::move(unpacked));
  try {
    reference = loader->run(inputs);
  } catch (const c10::Error& e) {
    throw RunnerError("running the AOTI package " + (shown.empty() ? path : shown) + " failed: " + e.what_without_backtrace());
  }

  const auto cuda = cuda_device_of(inputs, reference);
  choose_intra_op_threads(*loader, inputs, options, cores, cuda, result);
  at::set_num_threads(result.intra_op_threads);
  // The runs are compared with a reference made at the threads they run with: oneDNN's
  // convolutions split their sums by thread, so one package's bits differ between
  // thread counts (a ResNet-50 in 996 of 1000 logits at 1 against 2 threads), but never
  // between runs at one count.
  try {
    reference = loader->run(inputs);
  } catch (const c10::Error& e) {
    throw RunnerError("running the AOTI package " + (shown.empty() ? path : shown) + " failed: " + e.what_without_backtrace());
  }
  // The floor first, alone, on the serving threads' intra-op setting.
  result.floor_latencies_us = time_floor(plan_floor(options.floor, inputs, reference, result), options, cuda);
  result.threads.resize(static_cast<size_t>(options.threads));
  std::atomic<int64_t> mismatches{0};
  // Page faults are counted for the whole process between the two lines. Each line's
  // completion runs once every serving thread has reached it and before any leaves:
  // at the start line all have finished warming up and none has begun timing, at the
  // finish line all have finished timing. So the window holds every timed run of every
  // thread (their OpenMP workers' faults included) and no warm-up.
  int64_t faults_at_start = 0;
  int64_t faults_at_end = 0;
  const auto on_start = [&]() noexcept {
    result.rss_after_warmup_kib = resident_set_kib();
    faults_at_start = process_minor_faults();
  };
  const auto on_finish = [&]() noexcept { faults_at_end = process_minor_faults(); };
  std::barrier start_line(options.threads, on_start);
  std::barrier finish_line(options.threads, on_finish);
  std::vector<std::chrono::steady_clock::time_point> starts(options.threads), ends(options.threads);
  std::vector<std::string> errors(options.threads);
  const auto serve = [&](int t) {
    bool arrived = false;
    bool finished = false;
    try {
      if (options.pin_threads) {
        pin_to_cpu(t);
      }
      // OpenMP's thread count is per calling thread: set it in each serving thread.
      at::set_num_threads(result.intra_op_threads);
      auto& stats = result.threads[t];
      stats.latencies_us.reserve(static_cast<size_t>(options.iterations));
      // Each thread compares against its own copy, which stays in its core's cache.
      // Made before the warm-up, which then does exactly what a timed run does, so the
      // heap is in its steady state (no new pages) when timing starts.
      std::vector<at::Tensor> own_reference;
      for (const auto& tensor : reference) {
        own_reference.push_back(tensor.clone());
      }
      for (int64_t i = 0; i < options.warmup; ++i) {
        auto outputs = loader->run(inputs);
        if (!same_bits(outputs, own_reference)) {
          ++mismatches;
        }
      }
      arrived = true;
      start_line.arrive_and_wait();
      starts[t] = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < options.iterations; ++i) {
        const auto begin = std::chrono::steady_clock::now();
        auto outputs = loader->run(inputs);
        wait_for_device(cuda);
        const auto end = std::chrono::steady_clock::now();
        const double us = std::chrono::duration<double, std::micro>(end - begin).count();
        stats.latencies_us.push_back(us);
        if (!same_bits(outputs, own_reference)) {
          ++mismatches;
        }
      }
      ends[t] = std::chrono::steady_clock::now();
      finished = true;
      finish_line.arrive_and_wait();
    } catch (const std::exception& e) {
      errors[t] = e.what();
      // The others must not wait for this thread at a line it will never reach.
      if (!arrived) {
        start_line.arrive_and_drop();
      }
      if (!finished) {
        finish_line.arrive_and_drop();
      }
    }
  };
  // One serving thread is this one: it already owns the OpenMP team that loading and
  // the reference run created, so no second team competes for the cores.
  std::vector<std::thread> workers;
  for (int t = 1; t < options.threads; ++t) {
    try {
      workers.emplace_back(serve, t);
    } catch (const std::system_error& e) {
      errors[t] = std::string("could not start the thread: ") + e.what();
      start_line.arrive_and_drop();  // nobody waits for a thread that never ran
      finish_line.arrive_and_drop();
    }
  }
  serve(0);
  for (auto& worker : workers) {
    worker.join();
  }
  for (const auto& error : errors) {
    if (!error.empty()) {
      throw RunnerError("a serving thread failed: " + error.substr(0, error.find('\n')));
    }
  }
  result.wall_seconds = std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) -
                                                      *std::min_element(starts.begin(), starts.end()))
                            .count();
  result.mismatched_outputs = mismatches.load();
  result.minor_page_faults = faults_at_end - faults_at_start;
  result.rss_end_kib = resident_set_kib();
  result.reference_outputs = std::move(reference);
  return result;
}

double serving_throughput(const BenchResult& result) {
  int64_t runs = 0;
  for (const auto& t : result.threads) {
    runs += static_cast<int64_t>(t.latencies_us.size());
  }
  return result.wall_seconds > 0 ? static_cast<double>(runs) / result.wall_seconds : std::nan("");
}

std::string bench_json(const BenchResult& result, const std::string& malloc_policy) {
  std::vector<double> all;
  for (const auto& t : result.threads) {
    all.insert(all.end(), t.latencies_us.begin(), t.latencies_us.end());
  }
  const auto runs = static_cast<int64_t>(all.size());
  const double mean =
      runs ? std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(runs) : std::nan("");
  std::ostringstream out;
  out << "{\"iterations\": " << result.options.iterations << ", \"warmup\": " << result.options.warmup
      << ", \"threads\": " << result.options.threads
      << ", \"intra_op_threads\": " << result.intra_op_threads << ", \"intra_op_choice\": \""
      << result.intra_op_choice << "\", \"intra_op_trial_p50_us\": {";
  for (size_t k = 0; k < result.intra_op_trial.size(); ++k) {
    out << (k ? ", " : "") << "\"" << result.intra_op_trial[k].first
        << "\": " << json_number(result.intra_op_trial[k].second);
  }
  out << "}"
      << ", \"pinned\": " << (result.options.pin_threads ? "true" : "false") << ", \"malloc\": \""
      << malloc_policy << "\", \"p50_us\": " << json_number(percentile(all, 50))
      << ", \"p90_us\": " << json_number(percentile(all, 90))
      << ", \"p99_us\": " << json_number(percentile(all, 99)) << ", \"mean_us\": " << json_number(mean)
      << ", \"throughput_per_s\": " << json_number(serving_throughput(result))
      << ", \"wall_seconds\": " << json_number(result.wall_seconds)
      << ", \"floor\": \"" << floor_name(result.floor) << "\""
      << ", \"floor_p50_us\": " << json_number(percentile(result.floor_latencies_us, 50))
      << ", \"floor_p90_us\": " << json_number(percentile(result.floor_latencies_us, 90))
      << ", \"floor_p99_us\": " << json_number(percentile(result.floor_latencies_us, 99))
      << ", \"per_thread_p50_us\": [";
  for (size_t t = 0; t < result.threads.size(); ++t) {
    out << (t ? ", " : "") << json_number(percentile(result.threads[t].latencies_us, 50));
  }
  out << "], \"outputs_checked\": " << runs << ", \"mismatched_outputs\": " << result.mismatched_outputs
      << ", \"minor_page_faults\": " << result.minor_page_faults
      << ", \"page_faults_counted\": \"whole process, timed region\""
      << ", \"rss_start_kib\": " << result.rss_start_kib
      << ", \"rss_after_warmup_kib\": " << result.rss_after_warmup_kib
      << ", \"rss_end_kib\": " << result.rss_end_kib << "}";
  return out.str();
}

std::string describe_bench(const BenchResult& result, const std::string& allocator) {
  std::vector<double> all;
  for (const auto& t : result.threads) {
    all.insert(all.end(), t.latencies_us.begin(), t.latencies_us.end());
  }
  const double p50 = percentile(all, 50);
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  out << "bench: " << result.options.threads << " serving thread(s) x " << result.options.iterations
      << " timed runs (after " << result.options.warmup << " warm-up), " << result.intra_op_threads
      << " intra-op thread(s) each\n";
  out << "bench: intra-op threads " << result.intra_op_threads << ": " << result.intra_op_choice << "\n";
  out << "bench: allocator: " << allocator << "\n";
  out << "bench: latency p50 " << p50 << " us, p90 " << percentile(all, 90) << " us, p99 "
      << percentile(all, 99) << " us\n";
  for (size_t t = 0; t < result.threads.size(); ++t) {
    out << "bench: thread " << t << " p50 " << percentile(result.threads[t].latencies_us, 50) << " us\n";
  }
  out << "bench: throughput " << serving_throughput(result)
      << " runs/s (all timed runs over the wall time of the timed region)\n";
  const auto floor = percentile(result.floor_latencies_us, 50);
  switch (result.floor) {
    case Floor::kIdentityFourCopies:
      out << "bench: floor (4 copy_ into existing buffers, this process) p50 ";
      break;
    case Floor::kCopyInputsOutputs:
      out << "bench: floor (each of the " << result.floor_inputs << " input(s) and "
          << result.floor_outputs
          << " output(s) copied once with copy_ into existing buffers, this process) p50 ";
      break;
    case Floor::kNone:
      out << "bench: floor: none (the package has no input or output bytes to copy)\n";
      break;
  }
  if (result.floor != Floor::kNone) {
    out << floor << " us; package p50 / floor = " << std::setprecision(2) << p50 / floor
        << std::setprecision(1) << "\n";
  }
  out << "bench: outputs checked " << all.size() << ", bits differ from the first run in "
      << result.mismatched_outputs << "\n";
  out << "bench: minor page faults in the timed region, whole process: " << result.minor_page_faults
      << " (getrusage RUSAGE_SELF: every thread, intra-op workers included, from the end of the "
         "warm-up to the end of the last thread's timed runs, bit checks between runs included)\n";
  out << "bench: RSS " << result.rss_start_kib << " KiB at start (before loading), "
      << result.rss_after_warmup_kib << " KiB after warm-up, " << result.rss_end_kib
      << " KiB at end (" << std::showpos << result.rss_end_kib - result.rss_after_warmup_kib
      << std::noshowpos << " KiB over the timed runs)\n";
  return out.str();
}

}  // namespace aoti_runner
