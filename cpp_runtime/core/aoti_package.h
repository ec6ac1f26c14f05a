// Loading and running an AOTI package (AOTIModelPackageLoader), and what every C++
// runtime (aoti_runner, the Triton backend) checks before the package's own code runs.
// Pairs with python/aoti_deploy/runtime/aoti.py.
#pragma once

#include "op_libraries.h"
#include "package_spec.h"
#include "unpacked_package.h"

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace aoti_runner {

// After the trust policy (open_model) and before the package loads: the spec-only
// preflight (torch, device, machine, CPU flags, Python-only ops), then the op libraries
// in order, then the ops and classes the package calls. Throws the preflight's and the
// loader's RunnerErrors; nothing of the package itself has run when it throws.
void prepare_package(const PackageSpec& spec, const std::vector<OpLibraryFile>& op_libraries);

// Destroys a loader, then the unpacked folder it may still read from (a CUDA package's
// kernels can be loaded on first use), if it kept one.
struct PackageLoaderDeleter {
  std::shared_ptr<UnpackedPackage> kept;
  void operator()(torch::inductor::AOTIModelPackageLoader* loader);
};
using PackageLoader = std::unique_ptr<torch::inductor::AOTIModelPackageLoader, PackageLoaderDeleter>;

// One loader for a package whose preflight passed, with `num_runners` runners (the
// threads that may call run() at once; run() is thread-safe across them), on the given
// device index (-1: the package's). `path` is the .pt2: a file, or /proc/self/fd/N of a
// verified bundle's sealed copy; `shown` names it in messages (default: `path`).
// The package is unpacked into a private folder (UnpackedPackage) and the loader built
// from that folder; for a CPU package the folder is removed as soon as the loader is
// built (its model library is mapped and its constants loaded by then), so a loaded
// package leaves no file behind, even if the process is killed. A CUDA package keeps its
// folder until the loader is destroyed. Built under lock_torch_globals(). Throws a
// RunnerError with the loader's first line.
// With `unpacked` (a verified package unpacked as it was hashed: UnpackedPackage::hashed),
// the loader is built from that folder and `path` is not read; such a folder serves one
// loader.
PackageLoader load_package(const std::string& path, size_t num_runners = 1, int device_index = -1,
                           const std::string& shown = "", std::shared_ptr<UnpackedPackage> unpacked = nullptr);

// Loads the package and runs it once on validated inputs (in a single-threaded process:
// stderr is held during the run, to drop the runtime's echo of an error).
std::vector<at::Tensor> run_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                                    const std::string& shown = "", std::shared_ptr<UnpackedPackage> unpacked = nullptr);

// One line per output the spec records as a Python scalar (kind int, float or bool),
// as both runners print it after a run: "output[1] (count): int 9", a float with 17
// significant digits (%.17g, which reads back as the same double), a bool as true or
// false. None when the outputs do not line up with the spec's. runtime/aoti.py's
// scalar_output_lines says the same.
std::vector<std::string> scalar_output_lines(const PackageSpec& spec, const std::vector<at::Tensor>& outputs);

// A loader lent from the process-wide pool, for a server that loads and unloads models.
// glibc never unloads a package's model library (it has STB_GNU_UNIQUE symbols), so a
// loader built afresh on every reload would map one more copy each time. The pool keeps
// loaders keyed by the package's SHA-256, runner count and device, and lends a free one
// when the same package is loaded again: reloads then map nothing new. The lease gives
// the loader back when destroyed. A package no model holds keeps its loaders (and their
// extracted files) while it is one of the two such packages freed last; older ones are
// destroyed, and only their model libraries stay mapped.
class LoaderLease {
 public:
  struct Slot;
  LoaderLease() = default;
  explicit LoaderLease(std::shared_ptr<Slot> slot) : slot_(std::move(slot)) {}
  LoaderLease(LoaderLease&&) noexcept = default;
  LoaderLease& operator=(LoaderLease&& other) noexcept;
  LoaderLease(const LoaderLease&) = delete;
  LoaderLease& operator=(const LoaderLease&) = delete;
  ~LoaderLease();

  torch::inductor::AOTIModelPackageLoader& loader() const;
  bool reused() const;  // true: the pool had built this loader before, for an earlier lease

 private:
  void give_back() noexcept;
  std::shared_ptr<Slot> slot_;
};

// `sha256_hex` is the package's digest when already known (a verified bundle's, hashed
// as it was sealed); empty: the package file is hashed here.
LoaderLease lease_package_loader(const std::string& path, size_t num_runners, int device_index = -1,
                                 const std::string& sha256_hex = "", const std::string& shown = "");

// How many loaders the pool holds, and how many of them are lent out.
struct LoaderPoolSize {
  size_t loaders = 0;
  size_t lent = 0;
};
LoaderPoolSize loader_pool_size();

// Destroys every loader not lent out (their extracted files go with them; their model
// libraries stay mapped): for a server's shutdown. Returns how many it destroyed.
size_t drop_free_loaders();

}  // namespace aoti_runner
