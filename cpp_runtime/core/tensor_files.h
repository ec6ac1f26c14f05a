// Tensor files shared by the Python and C++ runtimes: a list of tensors in
// torch.save format, or for a package with names a dict of name -> tensor, read with
// torch::pickle_load. Pairs with python/aoti_deploy/runtime/tensor_files.py.
#pragma once

#include "package_spec.h"

#include <ATen/Tensor.h>

#include <string>
#include <vector>

namespace aoti_runner {

// The tensors of a file, in the package's order: a list or tuple as it is (a single
// tensor is a list of one), or a dict of name -> tensor put in the order of `names`,
// the package's recorded names of its `role`s ("input" or "output"). A dict for a
// package without names, or with a missing or unknown name, is a RunnerError (exit 2)
// that lists the expected names.
std::vector<at::Tensor> load_tensors(const std::string& path, const std::vector<std::string>& names = {},
                                     const std::string& role = "input");
// Writes `tensors` (moved to the CPU) in torch.save format: a tuple, or given `names`
// (one per tensor) a dict of name -> tensor in their order. Either loads with
// torch.load(weights_only=True), and back with load_tensors.
void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors,
                  const std::vector<std::string>& names = {});

// Tensor files hold CPU tensors; this moves them to the package's device.
std::vector<at::Tensor> to_package_device(const std::vector<at::Tensor>& tensors,
                                          const PackageSpec& spec);

}  // namespace aoti_runner
