"""The torchbind class my_ops::IdentityConvClass: state, forward, flattening and
pickling."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from aoti_deploy.ops import FakeIdentityConvClass


@pytest.fixture
def layer(op_library):
    return torch.classes.my_ops.IdentityConvClass(5)


def test_get_channels(layer):
    assert layer.get_channels() == 5


def test_obj_flatten_holds_the_state(layer):
    assert layer.__obj_flatten__() == (("channels", 5),)


def test_fake_class_unflattens_from_the_real_flattening(layer):
    fake = FakeIdentityConvClass.__obj_unflatten__(layer.__obj_flatten__())
    assert fake.get_channels() == 5


def test_pickle_round_trip_keeps_channels(layer):
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    assert restored.get_channels() == 5
    assert restored is not layer


def test_python_pickle_round_trip_uses_def_pickle(layer):
    # __getstate__ is the C++ def_pickle getter: it returns channels (plus the type name).
    assert layer.__getstate__()[0] == 5
    restored = pickle.loads(pickle.dumps(layer))
    assert restored.get_channels() == 5


def test_forward_copies_bits(layer):
    x = torch.tensor([-0.0, float("nan"), float("inf"), 1e-45] * 5).reshape(1, 5, 2, 2)
    y = layer.forward(x)
    assert torch.equal(y.view(torch.int32), x.view(torch.int32))


def test_forward_checks_channels(layer):
    with pytest.raises(RuntimeError, match=r"expected an input of shape \[N, 5, \.\.\.\].*got shape \[1, 3, 2, 2\]"):
        layer.forward(torch.zeros(1, 3, 2, 2))


def test_forward_rejects_int_input(layer):
    with pytest.raises(RuntimeError, match="got Int"):
        layer.forward(torch.zeros(1, 5, 2, 2, dtype=torch.int32))


class ClassLayerModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.classes.my_ops.IdentityConvClass(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer.forward(x)


def export_class_forward(x: torch.Tensor) -> None:
    torch.export.export(ClassLayerModule(), (x,), strict=False)


def fake_class_forward(x: torch.Tensor) -> None:
    with FakeTensorMode() as mode:
        FakeIdentityConvClass(5).forward(mode.from_tensor(x))


def fake_class_forward_op(x: torch.Tensor) -> None:
    with FakeTensorMode() as mode:
        torch.ops.my_ops.identity_conv_class_forward(mode.from_tensor(x), 5)


@pytest.mark.parametrize("trace", [export_class_forward, fake_class_forward, fake_class_forward_op],
                         ids=["export", "fake-class", "fake-op"])
def test_fake_forward_rejects_int_input_like_the_real_one(op_library, trace):
    # Tracing must refuse what the C++ forward refuses, with its message, rather
    # than produce a graph that only fails once it runs.
    with pytest.raises(RuntimeError, match=r"IdentityConvClass\.forward: expected a floating-point tensor .* got Int\b"):
        trace(torch.zeros(1, 5, 2, 2, dtype=torch.int32))


def test_channels_must_be_positive(op_library):
    with pytest.raises(RuntimeError, match="expected channels > 0, got 0"):
        torch.classes.my_ops.IdentityConvClass(0)
