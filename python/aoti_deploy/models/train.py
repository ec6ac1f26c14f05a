"""Training through the custom layers: fit the IdentityModel's two native conv
weights to a per-channel scale, with gradients flowing through the torchbind class
and the custom op (their autograd is registered in ops.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .identity import IdentityModel


@dataclass
class TrainResult:
    model: IdentityModel
    target_scale: list[float]
    learned_scale: list[float]
    losses: list[float]


def train_channel_scale(
    target_scale: list[float],
    steps: int = 200,
    lr: float = 0.05,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train a fresh IdentityModel so that model(x) == x * target_scale per channel.

    The forward runs all four layers; only the native convs have weights, and their
    gradients reach layer1 through the class and the op, so a layer that broke the
    gradient would leave layer1 untrained and the scale unlearned.

    Returns:
        The trained model (``is_identity`` is False now), the learned per-channel
        scale (product of the two conv weights) and the loss at every step.
    """
    torch.manual_seed(seed)
    channels = len(target_scale)
    model = IdentityModel(channels).train()
    scale = torch.tensor(target_scale).view(1, channels, 1, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        x = torch.randn(8, channels, 4, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), x * scale)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    model.eval()
    model.is_identity = False  # the instance no longer maps x to x
    learned = (model.layer1.weight * model.layer4.weight).detach().flatten().tolist()
    return TrainResult(model, list(target_scale), learned, losses)
