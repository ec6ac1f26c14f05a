// A request's input tensors, gathered from Triton's buffers and checked against the
// package spec with the runner core's validation (the same rules and words as
// aoti_runner), and a response's output tensors, copied into Triton's buffers.
#pragma once

#include "package_spec.h"
#include "triton_api.h"

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

namespace aoti_triton {

// Reads the package's inputs from one request, by their served names (the spec's
// recorded names, else INPUT__0..), as tensors on `device`, dense and row-major.
// A single element-aligned buffer on that device is used in place (valid until the
// request is released); inputs in several buffers, or on another device, are copied.
// Throws a RunnerError naming the problem (the request's error alone).
std::vector<at::Tensor> read_request_inputs(TRITONBACKEND_Request* request,
                                            const aoti_runner::PackageSpec& spec, const c10::Device& device);

// Adds each output the request asks for (by its served name) to `response`: rows
// [first, first + count) of dim 0 when `batched`, else the whole tensor; a Python
// scalar output (0-d in the package) as a one-element tensor [1]. Throws a RunnerError.
void write_response_outputs(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
                            const aoti_runner::PackageSpec& spec, const std::vector<at::Tensor>& outputs,
                            bool batched, int64_t first, int64_t count);

}  // namespace aoti_triton
