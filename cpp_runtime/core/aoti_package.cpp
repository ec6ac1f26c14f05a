#include "aoti_package.h"

#include "errors.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

namespace aoti_runner {

std::vector<at::Tensor> run_package(const std::string& path,
                                    const std::vector<at::Tensor>& inputs) {
  try {
    torch::inductor::AOTIModelPackageLoader loader(path, "model");
    return loader.run(inputs);
  } catch (const std::exception& e) {
    rethrow_with_context("running the AOTI package " + path + " failed", e, "");
  }
}

}  // namespace aoti_runner
