// Schemas of the my_ops library and the IdentityConvClass torchbind class.
// Kernels live in identity_conv_cpu.cpp and identity_conv_cuda.cu; this file only
// declares what the library offers, in one TORCH_LIBRARY block.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <string>
#include <tuple>

#include "identity_conv_check.h"

namespace identity_conv {

// Stateful identity layer. `channels` is checked against dim 1 of every input so
// the state is real, and it travels through pickling into AOTI packages.
class IdentityConvClass : public torch::CustomClassHolder {
 public:
  explicit IdentityConvClass(int64_t channels) : channels_(channels) {
    TORCH_CHECK(
        channels > 0,
        "my_ops::IdentityConvClass: expected channels > 0, got ", channels);
  }

  at::Tensor forward(const at::Tensor& x) const {
    check_identity_conv_input(x, "my_ops::IdentityConvClass.forward");
    TORCH_CHECK(
        x.dim() >= 2 && x.size(1) == channels_,
        "my_ops::IdentityConvClass.forward: expected an input of shape [N, ", channels_,
        ", ...] (channels=", channels_, "), got shape ", x.sizes());
    // Going through the dispatcher picks the CPU or CUDA kernel by the input's device.
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("my_ops::identity_conv_op", "")
            .typed<at::Tensor(const at::Tensor&)>();
    return op.call(x);
  }

  int64_t get_channels() const {
    return channels_;
  }

 private:
  int64_t channels_;
};

// Autograd kernel of the out= variant. Like PyTorch's own out= functions it is not
// differentiable; without this kernel a gradient would be dropped silently.
void identity_conv_out_autograd(const at::Tensor& x, const at::Tensor& out) {
  TORCH_CHECK(
      !(at::GradMode::is_enabled() && (x.requires_grad() || out.requires_grad())),
      "my_ops::identity_conv_op_out: out= variants do not support autograd, and an input "
      "requires grad. Use my_ops::identity_conv_op for training, or call this under "
      "torch.no_grad().");
  // Below Autograd only, not below ADInplaceOrView: the next kernel must be
  // identity_conv_out_ad_inplace_or_view, which records the write to `out`.
  at::AutoDispatchBelowAutograd guard;
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("my_ops::identity_conv_op_out", "")
                             .typed<void(const at::Tensor&, const at::Tensor&)>();
  op.call(x, out);
}

// ADInplaceOrView kernel of the out= variant, as PyTorch generates for its own
// in-place and out= ops. Bumping out's version counter is what lets autograd notice
// that a tensor it saved for backward was overwritten (even under no_grad) and
// raise, instead of computing a gradient from the new values.
void identity_conv_out_ad_inplace_or_view(const at::Tensor& x, const at::Tensor& out) {
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("my_ops::identity_conv_op_out", "")
                               .typed<void(const at::Tensor&, const at::Tensor&)>();
    op.call(x, out);
  }
  torch::autograd::increment_version(out);
}

// IdentityConvClass.forward as a stateless op over the class's flattened state. A
// stateful object has no place in an ONNX graph, so the ONNX export routes each
// call of the class's forward through this op, with `channels` as an argument
// (and, in the my_ops ONNX domain, as a node attribute). It runs the class's own
// forward, so its checks and bits are the class's. The kernel redispatches by the
// input's device, so one function serves the CPU and CUDA keys.
at::Tensor identity_conv_class_forward(const at::Tensor& x, int64_t channels) {
  return IdentityConvClass(channels).forward(x);
}

}  // namespace identity_conv

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("identity_conv_class_forward", &identity_conv::identity_conv_class_forward);
}

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) {
  m.impl("identity_conv_class_forward", &identity_conv::identity_conv_class_forward);
}

TORCH_LIBRARY_IMPL(my_ops, Autograd, m) {
  m.impl("identity_conv_op_out", &identity_conv::identity_conv_out_autograd);
}

TORCH_LIBRARY_IMPL(my_ops, ADInplaceOrView, m) {
  m.impl("identity_conv_op_out", &identity_conv::identity_conv_out_ad_inplace_or_view);
}

TORCH_LIBRARY(my_ops, m) {
  using identity_conv::IdentityConvClass;

  // Returns a new contiguous tensor with exactly the bits of x (float dtypes only).
  m.def("identity_conv_op(Tensor x) -> Tensor");

  // Writes exactly the bits of x into out (same shape and dtype, any strides).
  m.def("identity_conv_op_out(Tensor x, Tensor(a!) out) -> ()");

  // IdentityConvClass(channels).forward(x) as an op: the class's route into ONNX.
  m.def("identity_conv_class_forward(Tensor x, int channels) -> Tensor");

  // Stateful identity layer holding `channels`; forward checks dim 1 then copies bits.
  m.class_<IdentityConvClass>("IdentityConvClass")
      .def(torch::init<int64_t>())
      .def("forward", &IdentityConvClass::forward)
      .def("get_channels", &IdentityConvClass::get_channels)
      // Lets torch.export fakify the object: the Python fake class rebuilds from this.
      .def(
          "__obj_flatten__",
          [](const c10::intrusive_ptr<IdentityConvClass>& self) {
            return std::make_tuple(
                std::make_tuple(std::string("channels"), self->get_channels()));
          })
      .def_pickle(
          [](const c10::intrusive_ptr<IdentityConvClass>& self) -> int64_t {
            return self->get_channels();
          },
          [](int64_t channels) -> c10::intrusive_ptr<IdentityConvClass> {
            return c10::make_intrusive<IdentityConvClass>(channels);
          });
}
