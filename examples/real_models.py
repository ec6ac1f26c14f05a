"""Ordinary models for ``export_compile --model``, the kind a user brings. Compiled
code rounds differently from eager here (Inductor reorders reductions, fuses
multiply-adds and picks other conv algorithms), so their packages are checked against
eager under torch.testing's tolerance, and between runtimes bit for bit.

    export_compile --model examples.real_models:resnet_cnn --input-shape 2,3,64,64 \
        --dynamic-dim 0.0=1:32 --save-reference ref/
    export_compile --model examples.real_models:transformer_encoder --input-shape 2,16,64 \
        --dynamic-dim 0.1=2:128
    export_compile --model examples.real_models:affine_linear_sum --input-shape 8,64 --dtype float16 \
        --op-lib build/libextra_ops.so --fake-module examples.extra_ops_fakes
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def _seeded() -> Iterator[None]:
    """Weights drawn from seed 0, without touching the caller's random state."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        yield


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn, added to its input, then relu."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResNetCNN(nn.Module):
    """A small ResNet-style classifier: a conv-bn-relu stem, max pooling, two residual
    blocks, adaptive average pooling, a linear layer and softmax. Any batch size and
    any image of at least 4x4 pixels."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.blocks = nn.Sequential(ResidualBlock(channels), ResidualBlock(channels))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, classes)
        # Running statistics other than 0 and 1, as a trained network has.
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return torch.softmax(self.head(self.pool(x).flatten(1)), dim=1)


def resnet_cnn(channels: int = 16, classes: int = 10) -> nn.Module:
    """The module only: --input-shape B,3,H,W (e.g. 2,3,64,64), and --dynamic-dim
    0.0=1:32 for a dynamic batch."""
    with _seeded():
        return ResNetCNN(channels, classes)


def transformer_encoder(d_model: int = 64, nhead: int = 4, dim_feedforward: int = 128) -> nn.Module:
    """One torch.nn.TransformerEncoderLayer, batch first: input [B, S, d_model].
    --input-shape 2,16,64 and --dynamic-dim 0.1=2:128 for a dynamic sequence length."""
    with _seeded():
        return nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.0, batch_first=True)


class AffineLinearSum(nn.Module):
    """Another project's op (extra_ops::affine from libextra_ops.so), a linear layer,
    then a sum over the features: the reduction whose order Inductor may change.
    Works in any floating dtype (export_compile --dtype)."""

    def __init__(self, features: int = 64, hidden: int = 32) -> None:
        super().__init__()
        self.linear = nn.Linear(features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.ops.extra_ops.affine(x, 0.5, 0.25)
        return self.linear(x).sum(dim=1)


def affine_linear_sum(features: int = 64, hidden: int = 32) -> nn.Module:
    """The module only: --input-shape B,FEATURES. Load the library first: --op-lib
    build/libextra_ops.so --fake-module examples.extra_ops_fakes."""
    with _seeded():
        return AffineLinearSum(features, hidden)
