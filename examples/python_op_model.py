"""A model whose custom op exists only in Python (torch.library.custom_op). It
exports and runs from Python, but the C++ runtime has no Python to run the op, so
export_compile refuses it unless --allow-python-ops, and aoti_runner refuses the
package that option writes."""

from __future__ import annotations

import torch
from torch import nn


@torch.library.custom_op("python_only_example::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    """2 * x, computed by Python."""
    return x * 2


@double.register_fake
def _fake_double(x: torch.Tensor) -> torch.Tensor:
    """Fake kernel: an empty tensor of x's metadata."""
    return torch.empty_like(x)


class PythonOpModel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(double(x))


def python_op_model() -> nn.Module:
    """The module only: give its input with --input-shape."""
    return PythonOpModel()


class CondPythonOpModel(nn.Module):
    """The Python-only op inside a branch of torch.cond: still refused."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: double(t), lambda t: t - 1.0, (x,))


def cond_python_op_model() -> nn.Module:
    """The module only: give its input with --input-shape."""
    return CondPythonOpModel()
