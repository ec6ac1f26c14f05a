// The one rule for intra-op (OpenMP) threads, used by aoti_runner, its benchmark and
// the Triton backend: the CPUs this process may really use, shared out among every
// thread that runs a model at once.
#pragma once

#include <cstdint>

namespace aoti_runner {

// The CPUs this process may use: its affinity mask's count, capped by the CPU quota of
// its cgroup and every parent (cgroup v2 cpu.max, v1 cpu.cfs_quota_us), rounded up;
// at least 1. std::thread::hardware_concurrency counts the machine's CPUs instead.
int usable_cpus();

// Intra-op threads for each of `serving_threads` threads that run models at once, on
// `cpus` CPUs of which `reserved` are left to the process's other work (a server's
// front end): (cpus - reserved) / serving_threads, at least 1.
int intra_op_threads_for(int cpus, int64_t serving_threads, int reserved = 0);

}  // namespace aoti_runner
