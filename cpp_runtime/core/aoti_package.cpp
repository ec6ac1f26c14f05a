#include "aoti_package.h"

#include "digest.h"
#include "errors.h"
#include "op_libraries.h"
#include "preflight.h"
#include "torch_lock.h"

#include <torch/version.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstdio>
#include <iostream>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

// torch 2.13 and later build a loader from an unpacked package folder (and leave the
// folder to its owner); older ones only from a .pt2, which they extract themselves.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
#define AOTI_DEPLOY_LOADER_READS_FOLDERS 1
#else
#define AOTI_DEPLOY_LOADER_READS_FOLDERS 0
#endif

namespace aoti_runner {

void prepare_package(const PackageSpec& spec, const std::vector<OpLibraryFile>& op_libraries) {
  // Everything the spec alone can refuse is refused before any op library loads.
  const auto host = this_host();
  check_runs_here(spec, host);
  load_op_libraries(op_libraries, spec.op_library_namespaces);
  check_required_symbols(spec, host);
}

void PackageLoaderDeleter::operator()(torch::inductor::AOTIModelPackageLoader* loader) {
  delete loader;
  kept.reset();  // the folder goes after the loader that reads it
}

PackageLoader load_package(const std::string& path, size_t num_runners, int device_index, const std::string& shown,
                           std::shared_ptr<UnpackedPackage> unpacked) {
  const auto& name = shown.empty() ? path : shown;
  if (num_runners < 1) {
    throw RunnerError("a package loader needs at least 1 runner, got 0.");
  }
  if (unpacked && unpacked->dir().empty()) {
    throw RunnerError("internal error: the unpacked package " + name + " was loaded once already.");
  }
  try {
#if AOTI_DEPLOY_LOADER_READS_FOLDERS
    if (!unpacked) {
      unpacked = std::make_shared<UnpackedPackage>(path, name);
    }
    const auto lock = lock_torch_globals();
    PackageLoader loader(new torch::inductor::AOTIModelPackageLoader(unpacked->dir(), "model",
                                                                     /*run_single_threaded=*/false, num_runners,
                                                                     static_cast<c10::DeviceIndex>(device_index)));
    // A CPU package's loader has dlopen'ed its model library, read its constants (from
    // the library, or a weights blob) and its torchbind objects by now, and reads no
    // file again: the folder goes now. A CUDA package's runner may load its kernels'
    // cubins from the folder on first use, so that folder stays until the loader goes.
    if (loader->get_metadata()["AOTI_DEVICE_KEY"] == "cpu") {
      unpacked->remove();
    } else {
      loader.get_deleter().kept = std::move(unpacked);
    }
    return loader;
#else
    if (unpacked) {
      throw RunnerError("this torch's loader cannot load an unpacked package folder (torch 2.13 or later can).");
    }
    // A torch whose loader cannot read an unpacked folder extracts the package itself,
    // into a temp folder it removes when the loader is destroyed.
    const auto lock = lock_torch_globals();
    return PackageLoader(new torch::inductor::AOTIModelPackageLoader(
        path, "model", /*run_single_threaded=*/false, num_runners, static_cast<c10::DeviceIndex>(device_index)));
#endif
  } catch (const RunnerError&) {
    throw;
  } catch (const std::exception& e) {
    rethrow_with_context("could not load the AOTI package " + name, e, "");
  }
}

namespace {

// The AOTI runtime compiled into every package prints "Error: <what>" to stderr before
// it rethrows, and the runner reports the same error in its own line. For one run of
// a single-threaded process, stderr is held in memory and given back without that
// echo; anything else the run printed passes on, in order.
class StderrHold {
 public:
  StderrHold() {
    std::cerr.flush();
    std::fflush(stderr);
    held_ = memfd_create("aoti_runner_stderr", MFD_CLOEXEC);
    saved_ = held_ < 0 ? -1 : dup(STDERR_FILENO);
    if (saved_ < 0 || dup2(held_, STDERR_FILENO) < 0) {
      close_fds();
    }
  }
  StderrHold(const StderrHold&) = delete;
  StderrHold& operator=(const StderrHold&) = delete;
  ~StderrHold() { release(false); }

  // Restores stderr and writes what was held; after a failed run, less the runtime's
  // echo of the error.
  void release(bool failed) {
    if (held_ < 0) {
      return;
    }
    std::cerr.flush();
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    std::string text;
    char buffer[4096];
    ssize_t got = 0;
    if (lseek(held_, 0, SEEK_SET) == 0) {
      while ((got = read(held_, buffer, sizeof buffer)) > 0) {
        text.append(buffer, static_cast<size_t>(got));
      }
    }
    close_fds();
    if (failed) {
      // The runtime's echo is one line "Error: <what>" (its message, or the failed
      // call when the error came from a call out of the wrapper); a message may run on
      // over more lines (a backtrace), up to the next line the run printed.
      std::string kept;
      bool in_echo = false;
      size_t start = 0;
      while (start < text.size()) {
        const size_t end = std::min(text.find('\n', start), text.size());
        const std::string line = text.substr(start, end - start);
        if (line.rfind("Error: ", 0) == 0) {
          in_echo = true;
        } else if (in_echo && (line.rfind("Exception raised from", 0) == 0 || line.rfind("frame #", 0) == 0 ||
                               line.empty())) {
          // still the echo's backtrace
        } else {
          in_echo = false;
          kept.append(line).append("\n");
        }
        start = end + 1;
      }
      text = kept;
    }
    std::cerr << text << std::flush;
  }

 private:
  void close_fds() {
    if (held_ >= 0) {
      close(held_);
    }
    if (saved_ >= 0) {
      close(saved_);
    }
    held_ = saved_ = -1;
  }
  int held_ = -1;
  int saved_ = -1;
};

}  // namespace

std::vector<at::Tensor> run_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                                    const std::string& shown, std::shared_ptr<UnpackedPackage> unpacked) {
  auto loader = load_package(path, 1, -1, shown, std::move(unpacked));
  StderrHold hold;
  try {
    auto outputs = loader->run(inputs);
    hold.release(false);
    return outputs;
  } catch (const std::exception& e) {
    hold.release(true);
    rethrow_with_context("running the AOTI package " + (shown.empty() ? path : shown) + " failed", e, "");
  }
}

std::vector<std::string> scalar_output_lines(const PackageSpec& spec, const std::vector<at::Tensor>& outputs) {
  std::vector<std::string> lines;
  if (outputs.size() != spec.outputs.size()) {
    return lines;
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    const auto& kind = spec.outputs[k].kind;
    if (!spec.outputs[k].is_scalar() || outputs[k].numel() != 1) {
      continue;
    }
    std::string value;
    if (kind == "float") {
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", outputs[k].item<double>());
      value = text;
    } else if (kind == "bool") {
      value = outputs[k].item<bool>() ? "true" : "false";
    } else {
      value = std::to_string(outputs[k].item<int64_t>());
    }
    lines.push_back(tensor_label("output", k, spec.outputs) + ": " + kind + " " + value);
  }
  return lines;
}

// --- the loader pool ------------------------------------------------------------

struct LoaderLease::Slot {
  PackageLoader loader;
  bool lent = false;
  bool reused = false;
  uint64_t freed = 0;  // when it was last given back (the pool's clock)
};

namespace {

using PoolKey = std::tuple<std::string, size_t, int>;  // SHA-256 of the package, runners, device

struct Pool {
  std::mutex mutex;  // guards `slots` and `clock`; never held while a loader is built
  std::map<PoolKey, std::vector<std::shared_ptr<LoaderLease::Slot>>> slots;
  uint64_t clock = 0;
};

// Packages whose loaders are all free, kept for a reload of the same package. Beyond
// these, the loaders of the package freed longest ago are destroyed: their weights and
// extracted folders go, and only their model libraries stay mapped (glibc cannot unmap
// them). So rolling through package versions costs one library mapping per version and
// runner, not one loaded model; a package still served by any model keeps every loader
// it has, so models that load and unload together never rebuild theirs.
constexpr size_t kKeptFreePackages = 2;

// Takes the loaders of packages beyond kKeptFreePackages out of the pool (the caller
// holds its lock and destroys them after releasing it).
std::vector<std::shared_ptr<LoaderLease::Slot>> evict_free_loaders(Pool& shared) {
  std::vector<std::pair<uint64_t, PoolKey>> idle;  // (last freed, key) of packages no model holds
  for (const auto& [key, slots] : shared.slots) {
    uint64_t last_freed = 0;
    bool lent = false;
    for (const auto& slot : slots) {
      lent = lent || slot->lent;
      last_freed = std::max(last_freed, slot->freed);
    }
    if (!lent && !slots.empty()) {
      idle.emplace_back(last_freed, key);
    }
  }
  std::vector<std::shared_ptr<LoaderLease::Slot>> evicted;
  if (idle.size() <= kKeptFreePackages) {
    return evicted;
  }
  std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = kKeptFreePackages; i < idle.size(); ++i) {
    auto found = shared.slots.find(idle[i].second);
    for (auto& slot : found->second) {
      evicted.push_back(std::move(slot));
    }
    shared.slots.erase(found);
  }
  return evicted;
}

Pool& pool() {
  // Never destroyed: a loader's destructor at exit would run after torch's own statics.
  static auto* instance = new Pool;
  return *instance;
}

}  // namespace

LoaderLease& LoaderLease::operator=(LoaderLease&& other) noexcept {
  if (this != &other) {
    give_back();
    slot_ = std::move(other.slot_);
  }
  return *this;
}

LoaderLease::~LoaderLease() {
  give_back();
}

void LoaderLease::give_back() noexcept {
  if (!slot_) {
    return;
  }
  std::vector<std::shared_ptr<Slot>> evicted;
  {
    auto& shared = pool();
    std::lock_guard<std::mutex> lock(shared.mutex);
    slot_->lent = false;
    slot_->freed = ++shared.clock;
    slot_.reset();
    evicted = evict_free_loaders(shared);
  }
  // Destroyed here, outside the pool's lock.
}

torch::inductor::AOTIModelPackageLoader& LoaderLease::loader() const {
  if (!slot_) {
    throw RunnerError("internal error: an empty loader lease was used.");
  }
  return *slot_->loader;
}

bool LoaderLease::reused() const {
  return slot_ && slot_->reused;
}

LoaderLease lease_package_loader(const std::string& path, size_t num_runners, int device_index,
                                 const std::string& sha256_hex, const std::string& shown) {
  const PoolKey key{sha256_hex.empty() ? to_hex(sha256_file(path, "the AOTI package")) : sha256_hex, num_runners,
                    device_index};
  auto& shared = pool();
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    for (auto& slot : shared.slots[key]) {
      if (!slot->lent) {
        slot->lent = true;
        slot->reused = true;
        return LoaderLease(slot);
      }
    }
  }
  // None free (never built, or every one lent to a model still loaded): a new one.
  auto slot = std::make_shared<LoaderLease::Slot>();
  slot->loader = load_package(path, num_runners, device_index, shown);
  slot->lent = true;
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    shared.slots[key].push_back(slot);
  }
  return LoaderLease(slot);
}

LoaderPoolSize loader_pool_size() {
  LoaderPoolSize size;
  std::lock_guard<std::mutex> lock(pool().mutex);
  for (const auto& [key, slots] : pool().slots) {
    for (const auto& slot : slots) {
      ++size.loaders;
      size.lent += slot->lent ? 1 : 0;
    }
  }
  return size;
}

size_t drop_free_loaders() {
  std::vector<std::shared_ptr<LoaderLease::Slot>> dropped;
  {
    std::lock_guard<std::mutex> lock(pool().mutex);
    for (auto& [key, slots] : pool().slots) {
      for (auto it = slots.begin(); it != slots.end();) {
        if ((*it)->lent) {
          ++it;
        } else {
          dropped.push_back(std::move(*it));
          it = slots.erase(it);
        }
      }
    }
  }
  return dropped.size();  // destroyed here, outside the pool's lock
}

}  // namespace aoti_runner
