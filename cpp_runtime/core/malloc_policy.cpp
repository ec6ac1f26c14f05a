#include "malloc_policy.h"

#include "errors.h"

#include <malloc.h>

#include <limits>

// gcc says __SANITIZE_ADDRESS__, clang __has_feature (which gcc 12 cannot parse).
#if defined(__SANITIZE_ADDRESS__)
#define AOTI_DEPLOY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AOTI_DEPLOY_ASAN 1
#endif
#endif
#ifndef AOTI_DEPLOY_ASAN
#define AOTI_DEPLOY_ASAN 0
#endif

namespace aoti_runner {

MallocPolicy parse_malloc_policy(const std::string& name, const std::string& option) {
  if (name == "retain") {
    return MallocPolicy::kRetain;
  }
  if (name == "system") {
    return MallocPolicy::kSystem;
  }
  throw RunnerError(option + " expects 'retain' or 'system', got '" + name + "'.");
}

void apply_malloc_policy(MallocPolicy policy) {
  if (policy == MallocPolicy::kSystem) {
    return;
  }
#if AOTI_DEPLOY_ASAN
  // Under ASan malloc is the sanitizer's, whose mallopt does nothing and returns 0.
  return;
#endif
  // Every chunk from the heap (none mmap'ed), and free memory never handed back:
  // after the first run, each run's buffers reuse pages that are already mapped.
  if (mallopt(M_MMAP_MAX, 0) != 1 ||
      mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) != 1) {
    throw RunnerError("mallopt refused the retain policy; use the system policy.");
  }
}

void release_free_memory() {
#if !AOTI_DEPLOY_ASAN  // under ASan malloc is the sanitizer's: no glibc arenas to trim
  malloc_trim(0);
#endif
}

std::string describe_malloc_policy(MallocPolicy policy) {
  return policy == MallocPolicy::kRetain
             ? "glibc malloc, retain (M_MMAP_MAX=0, M_TRIM_THRESHOLD=max: freed blocks are "
               "reused, no page faults after warm-up)"
             : "glibc malloc, system defaults (blocks above the mmap threshold are mapped "
               "afresh on each run)";
}

}  // namespace aoti_runner
