// Tensor files shared by the Python and C++ runtimes: a list of tensors in
// torch.save format, read with torch::pickle_load. Pairs with
// python/aoti_deploy/runtime/tensor_files.py.
#pragma once

#include "package_spec.h"

#include <ATen/Tensor.h>

#include <string>
#include <vector>

namespace aoti_runner {

std::vector<at::Tensor> load_tensors(const std::string& path);
void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors);

// Tensor files hold CPU tensors; this moves them to the package's device.
std::vector<at::Tensor> to_package_device(const std::vector<at::Tensor>& tensors,
                                          const PackageSpec& spec);

}  // namespace aoti_runner
