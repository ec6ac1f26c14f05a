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
