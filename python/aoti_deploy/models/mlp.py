"""A small MLP whose weights come from a seed: two seeds give two versions of one model
(same inputs and outputs, other bits), as a rolling update publishes them."""

from __future__ import annotations

import torch
from torch import nn


class SeededMLP(nn.Module):
    """x [B, features] -> Linear -> ReLU -> Linear -> [B, outputs], native ops only.
    The weights are drawn from ``seed`` alone, so the same seed always gives the same
    model and another seed other outputs."""

    def __init__(self, seed: int, features: int = 16, hidden: int = 32, outputs: int = 8) -> None:
        super().__init__()
        self.hidden = nn.Linear(features, hidden)
        self.out = nn.Linear(hidden, outputs)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / parameter.shape[-1] ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))
