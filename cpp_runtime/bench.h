// The runner's serving benchmark and allocator policy: time a package inside this
// process, from one or several threads, and check every output's bits.
#pragma once

#include "malloc_policy.h"

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

class UnpackedPackage;

// What the memory floor times: the least data movement the package's work implies,
// with copy_ into buffers allocated before timing (no allocation, no page faults).
enum class Floor {
  kNone,                // nothing timed: the package has no input or output bytes to move
  kIdentityFourCopies,  // an IdentityModel package: its one input moved four times, layer by layer
  kCopyInputsOutputs,   // any other package: every input and every output copied once
};

struct BenchOptions {
  int64_t iterations = 1000;  // timed runs per thread
  int64_t warmup = 50;        // untimed runs per thread first
  int threads = 1;            // serving threads, one model instance each
  // Per serving thread. 0: chosen by timing the package before the warm-up, at 1 and
  // at cores / threads (when that is more than 1); the faster is kept.
  int intra_op_threads = 0;
  bool pin_threads = false;   // pin serving thread t to the t-th allowed CPU
  // The caller knows what the package is (its spec's is_identity): the 4-copy floor
  // means something only for the IdentityModel.
  Floor floor = Floor::kCopyInputsOutputs;
};

struct ThreadStats {
  std::vector<double> latencies_us;  // one per timed run, in run order
};

struct BenchResult {
  BenchOptions options;
  // The memory floor in this process, on the serving thread's settings (see Floor);
  // empty when floor is kNone.
  Floor floor = Floor::kNone;
  size_t floor_inputs = 0;   // tensors the floor copies (kCopyInputsOutputs)
  size_t floor_outputs = 0;
  std::vector<double> floor_latencies_us;
  int intra_op_threads = 0;
  std::string intra_op_choice;  // why intra_op_threads, for the report
  // When the count was timed: (intra-op threads, p50 in us) of each candidate.
  std::vector<std::pair<int, double>> intra_op_trial;
  double wall_seconds = 0;           // first timed run start to last timed run end
  std::vector<ThreadStats> threads;
  int64_t mismatched_outputs = 0;    // runs whose outputs' bits differ from the first run's
  // Minor page faults of the whole process (getrusage RUSAGE_SELF: every thread,
  // intra-op workers included) from the moment every serving thread has finished its
  // warm-up to the moment the last one finishes its timed runs; the bit checks
  // between runs are inside that window too.
  int64_t minor_page_faults = 0;
  int64_t rss_start_kib = 0;         // before the package loads
  int64_t rss_after_warmup_kib = 0;  // every thread warmed up: growth from here is the leak check
  int64_t rss_end_kib = 0;
  std::vector<at::Tensor> reference_outputs;  // the first run's, which every run must match
};

// Loads the package with one model instance per thread, runs it once for the
// reference outputs, then runs warm-up and timed iterations on every thread and
// compares each run's output bits with the reference (outside each run's timer).
// On a CUDA package every timed run (and the floor) ends with a device synchronize
// inside its timer, since AOTI's run only queues the kernels.
// `shown` and `unpacked`: as load_package takes them.
BenchResult bench_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                          const BenchOptions& options, const std::string& shown = "",
                          std::shared_ptr<UnpackedPackage> unpacked = nullptr);

// Serving throughput: all timed runs over the wall time of the timed region (which
// also holds the bit checks between runs, in every thread alike).
double serving_throughput(const BenchResult& result);

// p in [0, 100] of a list of latencies (nearest rank).
double percentile(std::vector<double> values, double p);

// The result as JSON (latency percentiles in microseconds, throughput, RSS).
std::string bench_json(const BenchResult& result, const std::string& malloc_policy);

// The result for people: one "bench: ..." line each for the settings, the allocator
// (as describe_malloc_policy gives it), latency, throughput, the floor, the bit
// checks, page faults and RSS. Each line ends with a newline.
std::string describe_bench(const BenchResult& result, const std::string& allocator);

// This process's resident set size, from /proc/self/status.
int64_t resident_set_kib();

}  // namespace aoti_runner
