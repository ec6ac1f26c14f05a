// CUDA kernel of my_ops::identity_conv_op: a grid-stride copy of same-width
// integers for contiguous inputs, an integer-typed strided copy otherwise. It runs
// on the current stream under a device guard.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>

#include "identity_conv_check.h"

namespace identity_conv {
namespace {

template <typename word_t>
__global__ void copy_words_kernel(const word_t* __restrict__ src, word_t* __restrict__ dst,
                                  int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = src[i];
  }
}

template <typename word_t>
void launch_copy_words(const at::Tensor& x, at::Tensor& out, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t n = x.numel();
  const int64_t max_blocks =
      static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 8;
  const int64_t blocks = std::min((n + kThreads - 1) / kThreads, max_blocks);
  copy_words_kernel<word_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const word_t*>(x.const_data_ptr()),
      static_cast<word_t*>(out.mutable_data_ptr()), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor identity_conv_cuda(const at::Tensor& x) {
  check_identity_conv_input(x, "my_ops::identity_conv_op");
  TORCH_CHECK(
      x.device().is_cuda(),
      "my_ops::identity_conv_op (CUDA kernel): expected a CUDA tensor, got ", x.device());
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  if (x.numel() == 0) {
    return out;
  }
  if (!x.is_contiguous()) {
    strided_bit_copy(out, x);
    return out;
  }
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  switch (x.element_size()) {
    case 2:
      launch_copy_words<uint16_t>(x, out, stream);
      break;
    case 4:
      launch_copy_words<uint32_t>(x, out, stream);
      break;
    case 8:
      launch_copy_words<uint64_t>(x, out, stream);
      break;
    default:
      TORCH_INTERNAL_ASSERT(false, "unexpected element size ", x.element_size());
  }
  return out;
}

void identity_conv_out_cuda(const at::Tensor& x, const at::Tensor& out) {
  check_identity_conv_out_on(x, out, at::kCUDA, "CUDA");
  const c10::cuda::CUDAGuard device_guard(x.device());
  if (x.numel() > 0) {
    // TensorIterator's copy runs on the current stream.
    strided_bit_copy(out, x);
  }
}

}  // namespace
}  // namespace identity_conv

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) {
  m.impl("identity_conv_op", &identity_conv::identity_conv_cuda);
  m.impl("identity_conv_op_out", &identity_conv::identity_conv_out_cuda);
}

TORCH_LIBRARY_IMPL(my_ops, SparseCUDA, m) {
  m.impl("identity_conv_op", &identity_conv::reject_sparse_input);
}

TORCH_LIBRARY_IMPL(my_ops, SparseCsrCUDA, m) {
  m.impl("identity_conv_op", &identity_conv::reject_sparse_input);
}
