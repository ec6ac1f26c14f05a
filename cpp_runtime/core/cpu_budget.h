// The one rule for intra-op (OpenMP) threads, used by aoti_runner, its benchmark and
// the Triton backend: the CPUs this process may really use, shared out among every
// thread that runs a model at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace aoti_runner {

// The CPUs this process may use: its affinity mask's count, capped by the CPU quota of
// its cgroup and every parent (cgroup v2 cpu.max, v1 cpu.cfs_quota_us), rounded up;
// at least 1. std::thread::hardware_concurrency counts the machine's CPUs instead.
int usable_cpus();

// The parts of usable_cpus, apart so that tests/contract/cpu_budget_vectors.json can
// run them on a made-up tree. The tightest CPU quota in CPUs on the path from the
// process's cgroup up to the root, or nullopt for none: `membership` is the text of
// /proc/self/cgroup, `root` where the cgroup file system is mounted (/sys/fs/cgroup).
std::optional<double> cgroup_quota_cpus(const std::string& membership, const std::string& root);
// `affinity` CPUs capped by `quota` rounded up; at least 1.
int usable_cpus(int affinity, std::optional<double> quota);

// Intra-op threads for each of `serving_threads` threads that run models at once, on
// `cpus` CPUs of which `reserved` are left to the process's other work (a server's
// front end): (cpus - reserved) / serving_threads, at least 1.
int intra_op_threads_for(int cpus, int64_t serving_threads, int reserved = 0);

// A package compiled for `compiled` intra-op threads (its spec's intra_op_threads; 0:
// not recorded) that runs at `running`: "" when they agree or nothing is recorded,
// else what that costs and how to export for `running` (the runner prints it, the
// Triton backend logs it). With freezing, oneDNN lays convolution weights out for the
// compile's count, and at another count may lay some out again on every call.
std::string thread_count_note(int64_t compiled, int running);

}  // namespace aoti_runner
