"""The tiny transformers models of examples/hf_models.py: each factory builds its
model from a config class (no download), in eval mode with the same weights every
time, and runs in eager on its example inputs, given by position or by name alike.
Cheap: no export or compile here."""

from __future__ import annotations

import pytest
import torch

from conftest import require_transformers  # noqa: E402

require_transformers()

from examples.hf_models import FACTORIES  # noqa: E402


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach the hub fails the test instead of downloading."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _leaves(output: object) -> list[torch.Tensor]:
    return list(output.values()) if hasattr(output, "values") else list(output)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factory_builds_and_runs_in_eager(name: str):
    model, inputs = FACTORIES[name]()
    assert not model.training
    assert isinstance(inputs, tuple) and all(isinstance(x, torch.Tensor) for x in inputs)
    with torch.no_grad():
        outputs = _leaves(model(*inputs))
    assert outputs and all(isinstance(x, torch.Tensor) and x.shape[0] == inputs[0].shape[0] for x in outputs)
    assert all(torch.isfinite(x).all() for x in outputs)
    # The same weights and inputs from a second call: seeded, and the caller's RNG untouched.
    state = torch.random.get_rng_state()
    again, same_inputs = FACTORIES[name]()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(inputs, same_inputs))
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(outputs, _leaves(again(*same_inputs))))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_keyword_inputs_name_the_forward_arguments(name: str):
    model, by_name = FACTORIES[name](keywords=True)
    _, by_position = FACTORIES[name]()
    assert isinstance(by_name, dict)
    with torch.no_grad():
        named = _leaves(model(**by_name))
        positional = _leaves(model(*by_position))
    if name == "gpt2":
        # GPT-2 takes its cache second, so only the ids go by position: the mask pads
        # the last row, whose logits differ; the other rows do not.
        assert list(by_name) == ["input_ids", "attention_mask"] and len(by_position) == 1
        assert torch.equal(named[0][:-1], positional[0][:-1])
    else:
        assert len(by_name) == len(by_position)
        assert all(torch.equal(a, b) for a, b in zip(named, positional))
