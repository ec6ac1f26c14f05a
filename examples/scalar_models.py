"""Example models that return Python scalars (ints, floats, bools) beside or instead of
tensors. Each runtime carries such an output as a 0-d tensor of its kind (int64,
float64, bool); the Python API hands back the Python value."""

from __future__ import annotations

import torch
from torch import nn


class SymIntItem(nn.Module):
    """PyTorch's own AOTI test model ``test_symint_item``
    (test/inductor/test_aot_inductor.py): a Python int read from a one-element tensor.
    torch.export traces it as a SymInt; eager returns an ``int``."""

    def forward(self, tensor: torch.Tensor) -> int:
        return tensor.item()


def symint_item_inputs(value: int = 1) -> tuple[torch.Tensor]:
    """The upstream test's input: an int32 tensor of one element."""
    return (torch.tensor([value], dtype=torch.int),)


class BatchStats(nn.Module):
    """Every kind of scalar output in one dict, next to a tensor: ``count`` (a SymInt
    from ``.item()``), ``mean`` (a SymFloat, from float32), ``flagged`` (a SymBool),
    ``rows`` (a SymInt from a dynamic size), ``scale`` (an int arithmetic on it),
    and the constants ``version`` (int), ``threshold`` (float) and ``calibrated`` (bool).
    AOTI alone cannot compile a float constant output; the toolkit carries it."""

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> dict[str, object]:
        return {
            "y": x * 2,
            "count": (x > 0).sum().item(),
            "mean": x.mean().item(),
            "flagged": flag.item(),
            "rows": x.shape[0],
            "scale": x.shape[0] * 2 + 1,
            "version": 3,
            "threshold": 0.1,
            "calibrated": True,
        }


def batch_stats_inputs(rows: int = 4, seed: int = 0, flag: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """x [rows, 3] float32 (rows dynamic, 1..16 in the tests) and a one-element bool flag
    ([1]: Triton serves no 0-d input)."""
    x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(seed))
    return x, torch.tensor([flag])
