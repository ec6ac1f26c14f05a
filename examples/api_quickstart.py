"""The Python API end to end, on a model of your own: export a model that takes
keyword arguments and returns a dict, call the package as the model is called,
verify it against eager and against the C++ runner, bundle it and write a Triton
model repository.

    python examples/api_quickstart.py [OUTPUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

import aoti_deploy as ad


class Scorer(nn.Module):
    """Token features in, a score per token and a pooled vector out; the mask is a
    keyword argument, as in most transformer models."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)
        self.score = nn.Linear(hidden, 1)

    def forward(self, features: torch.Tensor, *, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = torch.tanh(self.proj(features)) * mask.unsqueeze(-1)
        pooled = hidden.sum(dim=1) / mask.sum(dim=1, keepdim=True).clamp(min=1)
        return {"scores": self.score(hidden).squeeze(-1), "pooled": pooled}


def example_call(batch: int = 2, tokens: int = 8, seed: int = 0) -> tuple[tuple[torch.Tensor], dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, tokens, 32, generator=generator)
    mask = (torch.rand(batch, tokens, generator=generator) > 0.2).float()
    return (features,), {"mask": mask}


def main(out: Path) -> None:
    torch.manual_seed(0)
    model = Scorer().eval()
    args, kwargs = example_call()

    # torch.export's own dynamic shapes: one Dim shared by every input's batch dim.
    batch, tokens = ad.Dim("batch", min=1, max=64), ad.Dim("tokens", min=1, max=512)
    package = ad.export(
        model, args, kwargs,
        dynamic_shapes={"features": {0: batch, 1: tokens}, "mask": {0: batch, 1: tokens}},
        package_path=out / "scorer.pt2",
    )
    print(package.report)  # compared with eager at the example and at a second shape

    loaded = ad.load(package.path)
    outputs = loaded(*args, **kwargs)  # the model's own structure: a dict
    print({name: list(value.shape) for name, value in outputs.items()})

    other_args, other_kwargs = example_call(batch=5, tokens=13, seed=1)
    print(package.verify(other_args, other_kwargs))  # against eager, another shape
    print(package.verify(other_args, other_kwargs, against="cpp"))  # the C++ runner: bitwise

    bundle = package.bundle(out / "scorer_bundle")
    model_dir = package.to_triton(out / "triton_repository", "scorer")
    print(f"bundle: {bundle}\ntriton model: {model_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="aoti_deploy_example_")))
