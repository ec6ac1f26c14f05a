// Implementation of the serving benchmark (see bench.h).
#include "bench.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <malloc.h>
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
#include <limits>
#include <numeric>
#include <sstream>
#include <system_error>
#include <thread>

#include "runner.h"

namespace aoti_runner {

MallocPolicy parse_malloc_policy(const std::string& name) {
  if (name == "retain") {
    return MallocPolicy::kRetain;
  }
  if (name == "system") {
    return MallocPolicy::kSystem;
  }
  throw RunnerError("--malloc expects 'retain' or 'system', got '" + name + "'.");
}

void apply_malloc_policy(MallocPolicy policy) {
  if (policy == MallocPolicy::kSystem) {
    return;
  }
  // Every chunk from the heap (none mmap'ed), and free memory never handed back:
  // after the first run, each run's buffers reuse pages that are already mapped.
  if (mallopt(M_MMAP_MAX, 0) != 1 ||
      mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) != 1) {
    throw RunnerError("mallopt refused the retain policy; use --malloc system.");
  }
}

std::string describe_malloc_policy(MallocPolicy policy) {
  return policy == MallocPolicy::kRetain
             ? "glibc malloc, retain (M_MMAP_MAX=0, M_TRIM_THRESHOLD=max: freed blocks are "
               "reused, no page faults after warm-up)"
             : "glibc malloc, system defaults (blocks above the mmap threshold are mapped "
               "afresh on each run)";
}

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

// Below 1 MiB of input, one intra-op thread: the fork and join of a parallel region
// across cores costs more than the split saves (and on a 2-vCPU VM it made latency
// bimodal); above it, the cores are shared among the serving threads.
int default_intra_op_threads(const std::vector<at::Tensor>& inputs, int cores, int threads) {
  int64_t bytes = 0;
  for (const auto& tensor : inputs) {
    bytes += static_cast<int64_t>(tensor.nbytes());
  }
  return bytes < (int64_t{1} << 20) ? 1 : std::max(1, cores / threads);
}

int64_t thread_minor_faults() {
  struct rusage usage {};
  return getrusage(RUSAGE_THREAD, &usage) == 0 ? static_cast<int64_t>(usage.ru_minflt) : 0;
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

// Four copy_ calls through buffers that exist before timing: the least a 4-layer
// identity must do, since custom ops cannot fuse.
std::vector<double> time_floor(const at::Tensor& x, const BenchOptions& options) {
  std::vector<at::Tensor> buffers;
  for (int i = 0; i < 4; ++i) {
    buffers.push_back(at::empty_like(x));
  }
  std::vector<double> latencies;
  latencies.reserve(static_cast<size_t>(options.iterations));
  for (int64_t i = 0; i < options.warmup + options.iterations; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    buffers[0].copy_(x);
    buffers[1].copy_(buffers[0]);
    buffers[2].copy_(buffers[1]);
    buffers[3].copy_(buffers[2]);
    const auto end = std::chrono::steady_clock::now();
    if (i >= options.warmup) {
      latencies.push_back(std::chrono::duration<double, std::micro>(end - begin).count());
    }
  }
  return latencies;
}

}  // namespace

BenchResult bench_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                          const BenchOptions& options) {
  if (options.iterations < 1 || options.threads < 1 || options.warmup < 0) {
    throw RunnerError("--bench needs at least 1 iteration and 1 thread.");
  }
  BenchResult result;
  result.options = options;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  result.intra_op_threads = options.intra_op_threads > 0
                                ? options.intra_op_threads
                                : default_intra_op_threads(inputs, cores, options.threads);
  result.rss_start_kib = resident_set_kib();

  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  std::vector<at::Tensor> reference;
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, static_cast<size_t>(options.threads));
    at::set_num_threads(result.intra_op_threads);
    reference = loader->run(inputs);
  } catch (const c10::Error& e) {
    throw RunnerError("running the AOTI package " + path + " failed: " + e.what_without_backtrace());
  }

  // The floor first, alone, on the serving threads' intra-op setting.
  result.floor_latencies_us = time_floor(inputs.front(), options);
  result.threads.resize(static_cast<size_t>(options.threads));
  std::atomic<int64_t> minor_faults{0};
  std::atomic<int64_t> mismatches{0};
  std::barrier start_line(options.threads);
  std::vector<std::chrono::steady_clock::time_point> starts(options.threads), ends(options.threads);
  std::vector<std::string> errors(options.threads);
  const auto serve = [&](int t) {
    bool arrived = false;
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
      if (t == 0) {
        result.rss_after_warmup_kib = resident_set_kib();
      }
      const auto faults_before = thread_minor_faults();
      starts[t] = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < options.iterations; ++i) {
        const auto begin = std::chrono::steady_clock::now();
        auto outputs = loader->run(inputs);
        const auto end = std::chrono::steady_clock::now();
        const double us = std::chrono::duration<double, std::micro>(end - begin).count();
        stats.latencies_us.push_back(us);
        if (!same_bits(outputs, own_reference)) {
          ++mismatches;
        }
      }
      ends[t] = std::chrono::steady_clock::now();
      minor_faults += thread_minor_faults() - faults_before;
    } catch (const std::exception& e) {
      errors[t] = e.what();
      if (!arrived) {
        start_line.arrive_and_drop();  // the others must not wait for this thread
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
  result.minor_page_faults = minor_faults.load();
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
      << ", \"intra_op_threads\": " << result.intra_op_threads
      << ", \"pinned\": " << (result.options.pin_threads ? "true" : "false") << ", \"malloc\": \""
      << malloc_policy << "\", \"p50_us\": " << json_number(percentile(all, 50))
      << ", \"p90_us\": " << json_number(percentile(all, 90))
      << ", \"p99_us\": " << json_number(percentile(all, 99)) << ", \"mean_us\": " << json_number(mean)
      << ", \"throughput_per_s\": " << json_number(serving_throughput(result))
      << ", \"wall_seconds\": " << json_number(result.wall_seconds)
      << ", \"floor_p50_us\": " << json_number(percentile(result.floor_latencies_us, 50))
      << ", \"floor_p90_us\": " << json_number(percentile(result.floor_latencies_us, 90))
      << ", \"floor_p99_us\": " << json_number(percentile(result.floor_latencies_us, 99))
      << ", \"per_thread_p50_us\": [";
  for (size_t t = 0; t < result.threads.size(); ++t) {
    out << (t ? ", " : "") << json_number(percentile(result.threads[t].latencies_us, 50));
  }
  out << "], \"outputs_checked\": " << runs << ", \"mismatched_outputs\": " << result.mismatched_outputs
      << ", \"minor_page_faults\": " << result.minor_page_faults
      << ", \"rss_start_kib\": " << result.rss_start_kib
      << ", \"rss_after_warmup_kib\": " << result.rss_after_warmup_kib
      << ", \"rss_end_kib\": " << result.rss_end_kib << "}";
  return out.str();
}

}  // namespace aoti_runner
