// Input validation and the bit-preserving copy shared by the CPU and CUDA kernels.
// Every entry point of the op library validates through check_identity_conv_input,
// so a bad tensor gets the same message whichever device or API reached the kernel.
#pragma once

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

namespace identity_conv {

// The integer dtype with the same width as a supported float dtype. Copying
// through it moves bit patterns, so NaN payloads and -0.0 survive by construction.
inline at::ScalarType same_width_int_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
    case at::kBFloat16:
      return at::kShort;
    case at::kFloat:
      return at::kInt;
    case at::kDouble:
      return at::kLong;
    default:
      TORCH_INTERNAL_ASSERT(false, "no integer twin for dtype ", dtype);
  }
}

inline void check_identity_conv_input(const at::Tensor& x, const char* where) {
  TORCH_CHECK(x.defined(), where, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK(
      x.layout() == at::kStrided,
      where, ": expected a dense (strided) tensor, got layout ", x.layout(),
      ". Convert it with .to_dense() first.");
  const auto dtype = x.scalar_type();
  TORCH_CHECK(
      dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kFloat ||
          dtype == at::kDouble,
      where, ": expected a floating-point tensor (Half, BFloat16, Float or Double), got ",
      dtype, ". Cast the input with .to(torch.float32) or another supported dtype.");
}

// Kernel for the sparse (COO and CSR-family) dispatch keys: without it the dispatcher's generic "could not
// run ... with arguments from the SparseCPU backend" is all the user would see.
inline at::Tensor reject_sparse_input(const at::Tensor& x) {
  check_identity_conv_input(x, "my_ops::identity_conv_op");
  TORCH_INTERNAL_ASSERT(false, "unreachable: a sparse tensor passed the layout check");
}

// The out= variant's extra checks: out must match x, and must not overlap it.
inline void check_identity_conv_out(const at::Tensor& x, const at::Tensor& out, const char* where) {
  check_identity_conv_input(x, where);
  TORCH_CHECK(out.defined() && out.layout() == at::kStrided,
              where, ": expected a dense (strided) out tensor");
  TORCH_CHECK(out.scalar_type() == x.scalar_type(),
              where, ": expected out of dtype ", x.scalar_type(), ", got ", out.scalar_type());
  TORCH_CHECK(out.sizes() == x.sizes(),
              where, ": expected out of shape ", x.sizes(), ", got ", out.sizes());
  TORCH_CHECK(out.device() == x.device(),
              where, ": expected out on ", x.device(), ", got ", out.device());
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes,
              where, ": out has internal overlap (e.g. an expanded tensor); pass a dense tensor");
  at::assert_no_overlap(out, x);
}

// The out= variant's checks for the kernel of one device: check_identity_conv_out,
// then that x is on the kernel's device ("CPU" or "CUDA", which names both).
inline void check_identity_conv_out_on(const at::Tensor& x, const at::Tensor& out, at::DeviceType device,
                                       const char* kernel) {
  check_identity_conv_out(x, out, "my_ops::identity_conv_op_out");
  TORCH_CHECK(x.device().type() == device,
              "my_ops::identity_conv_op_out (", kernel, " kernel): expected ", kernel, " tensors, got ", x.device());
}

// Bit-exact copy of any-strided `x` into `out` (same shape and dtype, any strides),
// done as an integer copy so the values are never interpreted as floats.
// Works on any device: TensorIterator runs it on the current stream.
inline void strided_bit_copy(const at::Tensor& out, const at::Tensor& x) {
  const auto int_dtype = same_width_int_dtype(x.scalar_type());
  out.view(int_dtype).copy_(x.view(int_dtype));
}

}  // namespace identity_conv
