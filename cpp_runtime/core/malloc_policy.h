// The process's allocator policy, shared by aoti_runner (--malloc) and the Triton
// backend (its malloc backend-config setting): mallopt applies to the whole process.
#pragma once

#include <string>

namespace aoti_runner {

// How the process allocates. AOTI allocates every intermediate tensor afresh on each
// run; glibc serves blocks above its mmap threshold (128 KiB at first, 32 MiB at
// most) with fresh mmaps, so each run page-faults its buffers in again.
enum class MallocPolicy {
  kSystem,  // glibc's defaults, untouched
  kRetain,  // mallopt: no mmap'ed chunks, no trimming: freed blocks are reused
};

// `option` names the setting in the error (aoti_runner's flag, the backend's key).
MallocPolicy parse_malloc_policy(const std::string& name, const std::string& option = "--malloc");
// Applies the policy to this process (call before any large allocation).
void apply_malloc_policy(MallocPolicy policy);
// Hands the free pages of every malloc arena back to the system (malloc_trim), whatever
// the policy. For a server after a model is unloaded: each load runs on new threads,
// whose arenas otherwise keep what they freed resident, so RSS crept up with every
// load/unload cycle (about 0.1 MiB each) with nothing leaked.
void release_free_memory();
// One line for reports, e.g. "glibc malloc, retain (M_MMAP_MAX=0, M_TRIM_THRESHOLD=max)".
std::string describe_malloc_policy(MallocPolicy policy);

}  // namespace aoti_runner
