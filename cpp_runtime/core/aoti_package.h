// Loading and running an AOTI package (AOTIModelPackageLoader). Pairs with
// python/identity_conv/runtime/aoti.py. Load the op libraries and preflight first.
#pragma once

#include <ATen/Tensor.h>

#include <string>
#include <vector>

namespace aoti_runner {

// Loads the package and runs it once on validated inputs.
std::vector<at::Tensor> run_package(const std::string& path, const std::vector<at::Tensor>& inputs);

}  // namespace aoti_runner
