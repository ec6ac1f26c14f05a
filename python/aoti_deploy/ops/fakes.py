"""What Python adds to the op library's C++ registrations: typed wrappers, fake
kernels for torch.export and torch.compile, the fake torchbind class, and the op's
autograd formula. The schemas themselves live in C++ only."""

from __future__ import annotations

from typing import Any

import torch

OP_NAME = "my_ops::identity_conv_op"
OUT_OP_NAME = "my_ops::identity_conv_op_out"
CLASS_NAME = "my_ops::IdentityConvClass"
CLASS_FORWARD_OP_NAME = "my_ops::identity_conv_class_forward"


_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# c10's ScalarType names, so a fake's message names a dtype the way the C++ check does.
_CPP_DTYPE_NAMES = {
    torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
    torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
    torch.bool: "Bool", torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def _check_float_input(x: torch.Tensor, where: str) -> None:
    """The dtype rule of the C++ ``check_identity_conv_input`` (identity_conv_check.h),
    with its message, so tracing refuses what the real kernels refuse.

    Args:
        x: a (fake) tensor.
        where: the op or method named in the message.
    """
    torch._check(
        x.dtype in _FLOAT_DTYPES,
        lambda: f"{where}: expected a floating-point tensor (Half, BFloat16, Float or Double), got "
        f"{_CPP_DTYPE_NAMES.get(x.dtype, x.dtype)}. Cast the input with .to(torch.float32) or another "
        "supported dtype.",
    )


def identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Typed wrapper of ``my_ops::identity_conv_op``.

    Args:
        x: a float16, bfloat16, float32 or float64 tensor of any strides.

    Returns:
        A new contiguous tensor with exactly the bits of ``x``.
    """
    return torch.ops.my_ops.identity_conv_op(x)


def _fake_identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Fake kernel of ``my_ops::identity_conv_op``: metadata only.

    Args:
        x: a fake tensor.

    Returns:
        An empty contiguous tensor of x's shape, dtype and device, like the real
        kernels return.
    """
    _check_float_input(x, "my_ops::identity_conv_op")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def identity_conv_out(x: torch.Tensor, out: torch.Tensor) -> None:
    """Typed wrapper of ``my_ops::identity_conv_op_out``.

    Args:
        x: a float16, bfloat16, float32 or float64 tensor of any strides.
        out: a tensor of x's shape, dtype and device (any strides); it receives
            exactly the bits of ``x``.
    """
    torch.ops.my_ops.identity_conv_op_out(x, out)


def _fake_identity_conv_out(x: torch.Tensor, out: torch.Tensor) -> None:
    """Fake kernel of ``my_ops::identity_conv_op_out``: it returns nothing; the
    schema's ``Tensor(a!) out`` tells tracing that ``out`` is written.

    Args:
        x: a fake tensor.
        out: a fake tensor of x's shape and dtype.
    """
    torch._check(out.shape == x.shape, lambda: f"expected out of shape {list(x.shape)}, got {list(out.shape)}")
    torch._check(out.dtype == x.dtype, lambda: f"expected out of dtype {x.dtype}, got {out.dtype}")


def _identity_conv_setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """The gradient of an identity needs nothing saved."""


def _identity_conv_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """d(identity)/dx is the identity: the incoming gradient, copied by the op itself,
    so the backward is made of an op torch.compile already understands."""
    return torch.ops.my_ops.identity_conv_op(grad)


def _identity_conv_class_forward_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    """The class's forward is an identity in x too; ``channels`` is an int, so it
    gets no gradient. Without this formula the op had no autograd kernel, and
    PyTorch's fallback warns that its gradient may be silently wrong."""
    return torch.ops.my_ops.identity_conv_op(grad), None


def _fake_identity_conv_class_forward(x: torch.Tensor, channels: int) -> torch.Tensor:
    """Fake kernel of ``my_ops::identity_conv_class_forward``, the class's forward as
    an op over its flattened state (the route of the class into ONNX)."""
    return FakeIdentityConvClass(channels).forward(x)


class FakeIdentityConvClass:
    """Fake of the torchbind class ``my_ops::IdentityConvClass`` for tracing."""

    def __init__(self, channels: int) -> None:
        self.channels = channels

    @classmethod
    def __obj_unflatten__(cls, flattened: Any) -> "FakeIdentityConvClass":
        """Rebuild from the C++ ``__obj_flatten__`` output, ``(("channels", c),)``."""
        return cls(**dict(flattened))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Same checks and metadata as the real forward: a contiguous copy of x."""
        _check_float_input(x, "my_ops::IdentityConvClass.forward")
        torch._check(
            x.dim() >= 2 and x.shape[1] == self.channels,
            lambda: f"my_ops::IdentityConvClass.forward: expected an input of shape "
            f"[N, {self.channels}, ...], got {list(x.shape)}",
        )
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    def get_channels(self) -> int:
        return self.channels


_fakes_registered = False


def register_fakes() -> None:
    """Register the fakes, the fake class and the autograd formula once (the op
    library must be loaded first)."""
    global _fakes_registered
    if _fakes_registered:
        return
    torch.library.register_fake(OP_NAME)(_fake_identity_conv)
    torch.library.register_fake(OUT_OP_NAME)(_fake_identity_conv_out)
    torch.library.register_fake(CLASS_FORWARD_OP_NAME)(_fake_identity_conv_class_forward)
    torch.library.register_autograd(OP_NAME, _identity_conv_backward, setup_context=_identity_conv_setup_context)
    torch.library.register_autograd(
        CLASS_FORWARD_OP_NAME, _identity_conv_class_forward_backward, setup_context=_identity_conv_setup_context
    )
    torch._library.register_fake_class(CLASS_NAME)(FakeIdentityConvClass)
    _fakes_registered = True
