// CPU kernel of my_ops::identity_conv_op: a parallel memcpy for contiguous inputs,
// an integer-typed strided copy otherwise. Both preserve every bit.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>

#include "identity_conv_check.h"

namespace identity_conv {
namespace {

// Bytes per thread of the parallel copy: PyTorch's own copy_ grain (32768 elements
// of 4 bytes). Above it, both cores copy; a 1 MiB grain left a 0.6 MB input to one.
constexpr int64_t kParallelCopyGrainBytes = 128 * 1024;

at::Tensor identity_conv_cpu(const at::Tensor& x) {
  check_identity_conv_input(x, "my_ops::identity_conv_op");
  TORCH_CHECK(
      x.device().is_cpu(),
      "my_ops::identity_conv_op (CPU kernel): expected a CPU tensor, got ", x.device());
  auto out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  if (x.numel() == 0) {
    return out;
  }
  if (!x.is_contiguous()) {
    strided_bit_copy(out, x);
    return out;
  }
  const auto* src = static_cast<const char*>(x.const_data_ptr());
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  const int64_t nbytes = x.numel() * static_cast<int64_t>(x.element_size());
  at::parallel_for(0, nbytes, kParallelCopyGrainBytes, [&](int64_t begin, int64_t end) {
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin));
  });
  return out;
}

void identity_conv_out_cpu(const at::Tensor& x, const at::Tensor& out) {
  check_identity_conv_out_on(x, out, at::kCPU, "CPU");
  if (x.numel() > 0) {
    strided_bit_copy(out, x);
  }
}

}  // namespace
}  // namespace identity_conv

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("identity_conv_op", &identity_conv::identity_conv_cpu);
  m.impl("identity_conv_op_out", &identity_conv::identity_conv_out_cpu);
}

TORCH_LIBRARY_IMPL(my_ops, SparseCPU, m) {
  m.impl("identity_conv_op", &identity_conv::reject_sparse_input);
}

TORCH_LIBRARY_IMPL(my_ops, SparseCsrCPU, m) {
  m.impl("identity_conv_op", &identity_conv::reject_sparse_input);
}
