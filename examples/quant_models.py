"""A small CNN trained on scikit-learn's handwritten digits (1,797 labelled 8x8
images that ship inside scikit-learn: real data, no download), for the int8 deploys
(``quantize="int8"``): training takes about a second, and accuracy on the held-out
images shows what quantizing costs.

    model, (x,) = digits_cnn()                        # trained, eval mode; x: 60 held-out images
    (x_train, y_train), (x_test, y_test) = digits()
    aoti-deploy export --model examples.quant_models:digits_cnn --quantize int8 --calibration cal.pt

Needs the quant extra (scikit-learn, torchao).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

# The held-out share, and the training run: seeded, so every process trains the same weights.
HELD_OUT = 540
_EPOCHS, _BATCH, _SEED = 12, 60, 0


@functools.cache
def digits() -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """((x_train, y_train), (x_test, y_test)): images [N, 1, 8, 8] scaled to 0..1 and
    labels; the last HELD_OUT images of a seeded shuffle are held out."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(data.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(_SEED))
    x, y = x[order], y[order]
    return (x[:-HELD_OUT], y[:-HELD_OUT]), (x[-HELD_OUT:], y[-HELD_OUT:])


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


@functools.cache
def _trained() -> DigitsCNN:
    (x, y), _ = digits()
    with torch.random.fork_rng():
        torch.manual_seed(_SEED)
        model = DigitsCNN()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(_EPOCHS):
            for batch in torch.randperm(len(y)).split(_BATCH):
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                optimizer.step()
    return model.eval()


def digits_cnn(batch: int = _BATCH) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The trained CNN in eval mode, and its example call: the first ``batch``
    held-out images."""
    return _trained(), (digits()[1][0][:batch],)


def calibration(batches: int = 8) -> list[torch.Tensor]:
    """Calibration calls for quantize="int8": training batches of 60 images (the
    example's shape, as a static package's calibration must have)."""
    return list(digits()[0][0][: batches * _BATCH].split(_BATCH))
