// A second op library, independent of libidentity_conv_ops.so: its own namespace
// (extra_ops) and two CPU ops. The bring-your-own-model example and the tests use it to
// show that a package can need several libraries, loaded by both runtimes.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {

void check_affine_input(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(),
              "extra_ops::affine: expected a floating-point tensor, got ", x.scalar_type());
  TORCH_CHECK(x.layout() == at::kStrided,
              "extra_ops::affine: expected a dense (strided) tensor, got layout ", x.layout());
}

at::Tensor affine_cpu(const at::Tensor& x, double scale, double shift) {
  check_affine_input(x);
  // Two rounding steps (multiply, then add), the same in eager and in a package,
  // since both call this kernel.
  return x.mul(scale).add(shift);
}

at::Tensor scale_tensor_cpu(const at::Tensor& x, const at::Tensor& scale) {
  check_affine_input(x);
  TORCH_CHECK(scale.dim() == 0 && scale.scalar_type() == x.scalar_type(),
              "extra_ops::scale.Tensor: expected a 0-d scale of x's dtype ", x.scalar_type(),
              ", got a ", scale.dim(), "-d ", scale.scalar_type(), " tensor");
  return x.mul(scale);
}

}  // namespace

TORCH_LIBRARY(extra_ops, m) {
  // y = x * scale + shift, element-wise, in x's dtype.
  m.def("affine(Tensor x, float scale, float shift) -> Tensor");
  // y = x * scale for a 0-d scale tensor. Only a named overload, no default one: a
  // runner must check the overload a package calls, not the bare name.
  m.def("scale.Tensor(Tensor x, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(extra_ops, CPU, m) {
  m.impl("affine", &affine_cpu);
  m.impl("scale.Tensor", &scale_tensor_cpu);
}
