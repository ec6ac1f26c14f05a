"""A model and the example call to export it with, made three ways: given by the
caller (the Python API), the built-in IdentityModel of a shape (``IdentitySource``),
or a user's factory, ``package.module:function`` (``FactorySource``, the CLI's
--model). Each is built after the op libraries load, in the export's "build model"
stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import InputError
from ..package.dtypes import DEFAULT_RANDOM_VALUES, DTYPES, INPUT_DTYPES, INTEGER_DTYPES
from ..package.spec import INT64_MAX
from .call import CallInputs
from .identity import MODEL_VARIANTS, IdentityModel
from .user import DynamicDim, load_model

# Input dims of the IdentityModel that may be dynamic, and their position in NCHW.
DYNAMIC_DIMS = {"batch": 0, "height": 2, "width": 3}
DEFAULT_RANGES = {"batch": (1, 64), "height": (1, 1024), "width": (1, 1024)}


def seeded_input(
    shape: tuple[int, ...], dtype: str, device: str, seed: int, values: tuple[int, int] | None = None
) -> torch.Tensor:
    """A standard-normal tensor, drawn in float32 on the CPU so every dtype and
    device sees the same values for a seed; for an integer or bool dtype, uniform
    integers in ``values`` (inclusive; default 0 and 1, see DEFAULT_RANDOM_VALUES),
    drawn as int64 and cast, as the runners draw them."""
    generator = torch.Generator().manual_seed(seed)
    if dtype in DTYPES:
        return torch.randn(shape, generator=generator).to(DTYPES[dtype]).to(device)
    low, high = values or DEFAULT_RANDOM_VALUES
    # random_'s upper bound is exclusive; None draws up to int64's largest value.
    upper = None if high == INT64_MAX else high + 1
    drawn = torch.empty(shape, dtype=torch.int64).random_(low, upper, generator=generator)
    return drawn.to(INTEGER_DTYPES[dtype]).to(device)


@dataclass
class ModelExample:
    """A model in eval mode on its device, and what to export and check it with."""

    model: nn.Module
    # The example call: its tensors are the package's example inputs.
    call: CallInputs
    # The tensors torch.export traces with, in the call's places: the call's own,
    # except where a dynamic dim's example size is 1 (torch.export would fix it).
    traced: list[torch.Tensor]
    dynamic_dims: list[DynamicDim] = field(default_factory=list)
    name: str = ""
    # What names this source in the compile cache's key, besides the model itself.
    key: dict[str, Any] = field(default_factory=dict)
    # Modules whose source the cache key counts, and the one a Python runtime must
    # import to run the model's Python-only ops (a factory's module).
    source_module: str | None = None

    @property
    def inputs(self) -> list[torch.Tensor]:
        return self.call.tensors()


def check_dtype(dtype: str, for_factory: bool) -> None:
    """Raise InputError for a dtype no source takes, or an input-only dtype for the
    IdentityModel."""
    if dtype not in DTYPES and dtype not in INPUT_DTYPES:
        raise InputError(
            f"unsupported dtype {dtype!r}; expected one of {', '.join(DTYPES)}, or for a --model's "
            f"inputs {', '.join(INPUT_DTYPES)}"
        )
    if not for_factory and dtype not in DTYPES:
        raise InputError(
            f"--dtype {dtype} applies to the inputs of a model given with --model; the IdentityModel's "
            f"conv layers take {', '.join(DTYPES)}"
        )


@dataclass
class IdentitySource:
    """The built-in IdentityModel (conv, torchbind class, custom op, conv) and a
    seeded random input of its shape, with any of batch, height and width dynamic."""

    channels: int = 3
    batch: int = 1
    height: int = 224
    width: int = 224
    dtype: str = "float32"
    seed: int = 0
    # Names from DYNAMIC_DIMS, and their inclusive (min, max) ranges.
    dynamic: tuple[str, ...] = ()
    ranges: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_RANGES))
    # "functional" (layer3 is identity_conv_op) or "out" (identity_conv_op_out).
    variant: str = "functional"
    # A model built already (e.g. trained), used instead of a new IdentityModel.
    model: nn.Module | None = None

    @property
    def model_class(self) -> type[IdentityModel]:
        return MODEL_VARIANTS[self.variant]

    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    def export_shape(self) -> tuple[int, ...]:
        """The shape to trace with. torch.export specialises a dim whose example
        size is 1, so a dynamic dim of size 1 is traced at 2 (the range keeps 1)."""
        shape = list(self.shape())
        for name in self.dynamic:
            if shape[DYNAMIC_DIMS[name]] == 1:
                shape[DYNAMIC_DIMS[name]] = 2
        return tuple(shape)

    def check(self) -> None:
        """Raise InputError for a dtype, variant, dynamic dim or range that cannot work."""
        check_dtype(self.dtype, for_factory=False)
        if self.variant not in MODEL_VARIANTS:
            raise InputError(f"unknown model variant {self.variant!r}; expected one of {', '.join(MODEL_VARIANTS)}")
        for name in self.dynamic:
            if name not in DYNAMIC_DIMS:
                raise InputError(f"cannot make {name!r} dynamic; choose from {', '.join(DYNAMIC_DIMS)}")
            low, high = self.ranges[name]
            size = self.shape()[DYNAMIC_DIMS[name]]
            if not 1 <= low < high:
                raise InputError(f"--{name}-range {low}:{high} holds fewer than two sizes; expected 1 <= MIN < MAX")
            if not low <= size <= high:
                raise InputError(
                    f"--{name} {size} is outside --{name}-range {low}:{high}; the example input must lie in the range"
                )

    def build(self, device: str) -> ModelExample:
        model = self.model if self.model is not None else self.model_class(self.channels)
        model = model.to(device=device, dtype=DTYPES[self.dtype]).eval()
        inputs = [seeded_input(self.shape(), self.dtype, device, self.seed)]
        dynamic_dims = [DynamicDim(((0, DYNAMIC_DIMS[name]),), *self.ranges[name], label=name) for name in self.dynamic]
        traced = inputs if self.export_shape() == self.shape() else [
            seeded_input(self.export_shape(), self.dtype, device, self.seed)
        ]
        key = {"dtype": self.dtype, "variant": self.variant if self.model is None else None}
        return ModelExample(model, CallInputs(tuple(inputs)), traced, dynamic_dims, type(model).__name__, key)


@dataclass
class FactorySource:
    """A user's model from ``package.module:factory`` (called with ``model_args``):
    its example inputs come from the factory, else seeded random ones of
    ``input_shapes`` and ``dtype`` (an integer dtype draws ``input_values``)."""

    target: str
    model_args: dict[str, object] = field(default_factory=dict)
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    dynamic_dims: list[DynamicDim] = field(default_factory=list)
    dtype: str = "float32"
    seed: int = 0
    input_values: dict[int, tuple[int, int]] = field(default_factory=dict)

    def check(self) -> None:
        check_dtype(self.dtype, for_factory=True)

    def build(self, device: str) -> ModelExample:
        """The user's model in eval mode on the device, its example inputs, the
        inputs to trace with, and the dynamic dims checked against the inputs."""
        model, factory_call = load_model(self.target, self.model_args)
        model = model.to(device=device).eval()
        if factory_call is not None:
            if self.input_shapes:
                raise InputError(
                    f"--model {self.target} returns its own example inputs, so --input-shape is not used; drop it"
                )
            call = factory_call.map_tensors(lambda x: x.to(device))
            inputs = call.tensors()
        else:
            if not self.input_shapes:
                raise InputError(
                    f"--model {self.target} returns a module only, so its example inputs need shapes: "
                    "pass --input-shape once per forward argument (e.g. --input-shape 1,3,224,224), "
                    "or let the factory return (module, example_inputs)"
                )
            if self.dtype in DTYPES:  # an integer --dtype is the inputs' alone
                model = model.to(dtype=DTYPES[self.dtype])
            inputs = [
                seeded_input(shape, self.dtype, device, self.seed + i, self.input_values.get(i))
                for i, shape in enumerate(self.input_shapes)
            ]
            call = CallInputs(tuple(inputs))
        traced = list(inputs)
        for dynamic in self.dynamic_dims:
            self._check_dynamic_dim(dynamic, inputs)
            for i, d in dynamic.positions:
                if inputs[i].shape[d] != 1:
                    continue
                # torch.export specialises a size-1 example dim to 1; trace at 2 instead.
                if factory_call is not None:
                    raise InputError(
                        f"--dynamic-dim {dynamic}: example input {i} has size 1 in dim {d}, which "
                        "torch.export fixes to 1; give an example of size >= 2 there"
                    )
                shape = list(traced[i].shape)
                shape[d] = 2
                traced[i] = seeded_input(tuple(shape), self.dtype, device, self.seed + i, self.input_values.get(i))
        key = {"dtype": self.dtype, "model": self.target, "model_args": repr(sorted(self.model_args.items()))}
        return ModelExample(model, call, traced, list(self.dynamic_dims), self.target, key,
                            source_module=self.target.split(":")[0])

    @staticmethod
    def _check_dynamic_dim(dynamic: DynamicDim, inputs: list[torch.Tensor]) -> None:
        sizes = {
            f"input {i} dim {d}": inputs[i].shape[d]
            for i, d in dynamic.positions
            if i < len(inputs) and d < inputs[i].dim()
        }
        if len(set(sizes.values())) > 1:
            raise InputError(
                f"--dynamic-dim {dynamic}: these positions share one size, but the example inputs differ "
                f"there ({', '.join(f'{k}: {v}' for k, v in sizes.items())}); give them the same size or "
                "separate --dynamic-dim options"
            )
        for i, d in dynamic.positions:
            if i >= len(inputs) or d >= inputs[i].dim():
                raise InputError(
                    f"--dynamic-dim {dynamic}: there is no dim {d} of input {i}; the example inputs have "
                    f"shapes {', '.join(str(list(x.shape)) for x in inputs)}"
                )
            size = inputs[i].shape[d]
            if size < dynamic.min or (dynamic.max is not None and size > dynamic.max):
                raise InputError(
                    f"--dynamic-dim {dynamic}: the example input {i} has size {size} in dim {d}, outside "
                    f"{str(dynamic).partition('=')[2]}; the example must lie in the range"
                )


def given_example(model: nn.Module, call: CallInputs, device: str) -> ModelExample:
    """The Python API's model and example call, on ``device``, in eval mode (an
    ExportedProgram's ``module()`` is left as it is: it refuses ``eval()``)."""
    call.check_leaves()
    model = model.to(device=device)
    if not isinstance(model, torch.fx.GraphModule):
        model = model.eval()
    call = call.map_tensors(lambda x: x.detach().to(device))
    inputs = call.tensors()
    if not inputs:
        raise InputError("the example call has no tensor input; a package takes at least one tensor")
    return ModelExample(model, call, list(inputs), [], type(model).__name__)
