#include "torch_lock.h"

namespace aoti_runner {

std::unique_lock<std::mutex> lock_torch_globals() {
  // One mutex in the process: the runner core is linked into each binary once.
  static std::mutex mutex;
  return std::unique_lock<std::mutex>(mutex);
}

}  // namespace aoti_runner
