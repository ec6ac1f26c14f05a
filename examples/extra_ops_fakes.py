"""Fakes of the example library libextra_ops.so (examples/extra_ops): what Python
adds to a C++ op so torch.export can trace it. Import it after loading the library,
e.g. ``export_compile --op-lib build/libextra_ops.so --fake-module examples.extra_ops_fakes``."""

from __future__ import annotations

import torch


@torch.library.register_fake("extra_ops::affine")
def _fake_affine(x: torch.Tensor, scale: float, shift: float) -> torch.Tensor:
    """Fake kernel of ``extra_ops::affine``: metadata only.

    Args:
        x: a fake floating-point tensor.
        scale: unused by the fake.
        shift: unused by the fake.

    Returns:
        An empty contiguous tensor of x's shape, dtype and device.
    """
    torch._check(x.is_floating_point(), lambda: f"extra_ops::affine: expected a floating-point tensor, got {x.dtype}")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake("extra_ops::scale.Tensor")
def _fake_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Fake kernel of ``extra_ops::scale.Tensor`` (a named overload only): metadata only.

    Args:
        x: a fake floating-point tensor.
        scale: a fake 0-d tensor of x's dtype.

    Returns:
        An empty contiguous tensor of x's shape, dtype and device.
    """
    torch._check(scale.dim() == 0, lambda: f"extra_ops::scale.Tensor: expected a 0-d scale, got {scale.dim()}-d")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _onnx_affine(op, x, scale: float, shift: float):
    """Portable ONNX translation of ``extra_ops::affine``: ``Mul`` then ``Add``, the two
    roundings the kernel makes (``x.mul(scale).add(shift)``), with the scalars cast
    to x's dtype like the kernel does. Registered here, next to the fake; the toolkit
    is imported lazily, so this module also works without it."""
    return op.Add(op.Mul(x, op.CastLike(scale, x)), op.CastLike(shift, x))


try:
    from aoti_deploy.compiler.onnx_translations import register_onnx_translation
except ImportError:  # the fakes work without the toolkit
    pass
else:
    register_onnx_translation("extra_ops::affine", _onnx_affine)
