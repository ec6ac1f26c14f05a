"""Example user models for ``export_compile --model``. Each factory returns a module,
or a (module, example_inputs) pair. None of them is an identity, so the runners check
them against a saved reference (--save-reference, then --expected)."""

from __future__ import annotations

import torch
from torch import nn


class ScaleShiftModel(nn.Module):
    """Two inputs, two outputs, native ops only: x [B, F] and y [F] give
    relu(x * scale + y) (Inductor fuses the three ops into one loop) and the row sums
    of x * scale (a reduction, whose summation order Inductor may change)."""

    def __init__(self, features: int = 16) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.scale = nn.Parameter(torch.randn(features, generator=generator))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = x * self.scale
        return torch.relu(scaled + y), scaled.sum(dim=1)


def scale_shift_model(features: int = 16) -> nn.Module:
    """The module only: give its inputs with --input-shape B,F --input-shape F."""
    return ScaleShiftModel(features)


class TwoLibraryModel(nn.Module):
    """Custom ops from two libraries: my_ops::identity_conv_op (libidentity_conv_ops.so)
    and extra_ops::affine (libextra_ops.so), around a native multiply."""

    def __init__(self, scale: float = 0.5, shift: float = 1.0) -> None:
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.ops.my_ops.identity_conv_op(x)
        x = torch.ops.extra_ops.affine(x, self.scale, self.shift)
        return x * 2.0


def two_library_model(scale: float = 0.5, shift: float = 1.0) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The module and its example input, a seeded [4, 3, 8, 8] float32 tensor. Load
    both libraries first: --op-lib build/libidentity_conv_ops.so --op-lib
    build/libextra_ops.so --fake-module examples.extra_ops_fakes."""
    generator = torch.Generator().manual_seed(1)
    return TwoLibraryModel(scale, shift), (torch.randn(4, 3, 8, 8, generator=generator),)


class PairModel(nn.Module):
    """Two inputs that share their batch size, and a dict output that holds a list:
    the package returns the leaves flat, in pytree order (sum, parts[0], parts[1])."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, object]:
        return {"sum": x + y, "parts": [x * 2.0, torch.tanh(y)]}


def pair_model() -> nn.Module:
    """The module only: give --input-shape B,F twice and --dynamic-dim 0.0,1.0=MIN:MAX."""
    return PairModel()


class ScalarScaleModel(nn.Module):
    """A 0-d input and an op with only a named overload: extra_ops::scale.Tensor
    (libextra_ops.so, fakes in examples.extra_ops_fakes) scales x by the scalar s."""

    def forward(self, s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.extra_ops.scale.Tensor(x, s) + 1.0


def scalar_scale_model() -> nn.Module:
    """The module only: --input-shape "" (the 0-d scale) --input-shape 2,3."""
    return ScalarScaleModel()


class AffinePairModel(nn.Module):
    """Two inputs that share a batch dim and two outputs that follow it, around a custom
    op of libextra_ops.so (extra_ops::affine, fakes in examples.extra_ops_fakes): the
    served bring-your-own model of the Triton tests and README."""

    def __init__(self, scale: float = 0.5, shift: float = 1.0) -> None:
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = torch.ops.extra_ops.affine(x, self.scale, self.shift)
        return shifted * y, torch.tanh(y).sum(dim=1)


def affine_pair_model(scale: float = 0.5, shift: float = 1.0) -> nn.Module:
    """The module only: --input-shape B,F twice and --dynamic-dim 0.0,1.0=MIN:MAX, with
    --op-lib build/libextra_ops.so --fake-module examples.extra_ops_fakes."""
    return AffinePairModel(scale, shift)


class ScoreModel(nn.Module):
    """One score per example, as a ranking model returns it: features x [B, F] and a
    per-example weight w [B] give scores [B] (the weighted sum of x's row) and the
    weighted features [B, F]. Both [B] tensors are only their batch dim: Triton serves
    the model batched through its reshape (requests and responses carry them as [B, 1])."""

    def __init__(self, features: int = 8) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.weight = nn.Parameter(torch.randn(features, generator=generator))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * self.weight).sum(dim=1) * w, x * w.unsqueeze(-1)


def score_model(features: int = 8) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """(module, example inputs): x [4, F] and w [4]; --dynamic-dim 0.0,1.0=1:16 makes
    their shared batch dynamic."""
    generator = torch.Generator().manual_seed(4)
    return ScoreModel(features).eval(), (torch.randn(4, features, generator=generator),
                                         torch.rand(4, generator=generator))


class KeywordModel(nn.Module):
    """Inputs as torch.export takes them, through the CLI: a tensor, a dict of
    tensors, a Python float (baked in) and a keyword-only mask; the package takes
    its three tensors flat, in order (features, extras_bias, mask)."""

    def __init__(self, features: int = 6) -> None:
        super().__init__()
        self.proj = nn.Linear(features, features)

    def forward(self, features: torch.Tensor, extras: dict[str, torch.Tensor], scale: float, *,
                mask: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = self.proj(features * scale + extras["bias"]) * mask.unsqueeze(-1)
        return {"hidden": hidden, "total": hidden.sum(dim=-1)}


def keyword_model(features: int = 6) -> tuple[nn.Module, tuple[object, ...], dict[str, torch.Tensor]]:
    """(module, args, kwargs): batch 3 of 5 tokens; --dynamic-dim 0.0,1.0,2.0=1:8
    makes the batch of all three tensors dynamic."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(2)
    args = (torch.randn(3, 5, features, generator=generator),
            {"bias": torch.randn(3, 5, features, generator=generator)}, 0.5)
    return KeywordModel(features).eval(), args, {"mask": (torch.rand(3, 5, generator=generator) > 0.3).float()}
