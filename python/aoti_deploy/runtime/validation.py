"""Input validation against the package spec: count, rank, each dim, dtype, device,
layout, then shared dims, then the values of inputs that index a tensor. AOTI itself
checks none of the first by default, and reads out of bounds or returns garbage on a
wrong input; an index out of range aborts the process from an OpenMP region.

The decision is made on InputDesc (what a tensor looks like), so the vectors in
tests/contract/validation_vectors.json can pin it against
cpp_runtime/core/validation.cpp without building tensors."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..package.dtypes import DTYPES, dtype_name
from ..package.spec import PackageSpec, ValueRange, tensor_label


@dataclass(frozen=True)
class InputDesc:
    """An input as validation sees it."""

    dtype: str
    shape: tuple[int, ...]
    device: str = "cpu"
    layout: str = "strided"
    # The elements in row-major order, when known (the contract vectors give them);
    # runtimes check tensors' values with check_values instead.
    values: tuple[int, ...] | None = None

    @classmethod
    def of(cls, tensor: object) -> "InputDesc":
        import torch

        assert isinstance(tensor, torch.Tensor)
        layout = "strided" if tensor.layout == torch.strided else str(tensor.layout).removeprefix("torch.")
        return cls(dtype_name(tensor.dtype), tuple(tensor.shape), str(tensor.device), layout)


def check_inputs(inputs: list[InputDesc], spec: PackageSpec) -> None:
    """Raise InputError, one line naming the input ("input[0]", or "input[0]
    (input_ids)" for a package with names), the expected and the actual value, on the
    first mismatch. Kinds: count, rank, dim, dtype, device, layout, shared_dim,
    value (only for inputs whose ``values`` are given)."""
    if len(inputs) != len(spec.inputs):
        raise InputError(
            f"wrong number of inputs: the package expects {len(spec.inputs)}, got {len(inputs)}.", kind="count"
        )
    for i, (given, expected) in enumerate(zip(inputs, spec.inputs)):
        name = tensor_label("input", i, spec.inputs)
        if len(given.shape) != len(expected.dims):
            raise InputError(
                f"{name}: expected rank {len(expected.dims)} {expected.shape_str()}, got rank {len(given.shape)} "
                f"{list(given.shape)}.",
                kind="rank",
            )
        for d, (size, dim) in enumerate(zip(given.shape, expected.dims)):
            if not dim.contains(size):
                raise InputError(
                    f"{name}: dim {d} expected {dim.wanted()}, got {size} (shape {list(given.shape)}, package expects "
                    f"{expected.shape_str()}).",
                    kind="dim",
                )
        if given.dtype != expected.dtype:
            # Re-exporting is a fix only for a dtype export_compile builds for.
            reexport = f", or re-export the package with --dtype {given.dtype}" if given.dtype in DTYPES else ""
            raise InputError(
                f"{name}: expected dtype {expected.dtype}, got {given.dtype}. Convert the input to "
                f"{expected.dtype}{reexport}.",
                kind="dtype",
            )
        if given.device.split(":", 1)[0] != spec.device.split(":", 1)[0]:
            raise InputError(f"{name}: expected a tensor on {spec.device}, got one on {given.device}.", kind="device")
        if given.layout != "strided":
            raise InputError(f"{name}: expected a dense (strided) tensor, got layout {given.layout}.", kind="layout")
    for group in spec.shared_dims:
        (i0, d0), first = group[0], inputs[group[0][0]].shape[group[0][1]]
        for i, d in group[1:]:
            size = inputs[i].shape[d]
            if size != first:
                label, first_label = tensor_label("input", i, spec.inputs), tensor_label("input", i0, spec.inputs)
                raise InputError(
                    f"{label}: dim {d} must equal {first_label} dim {d0} (the package compiled them as one dynamic "
                    f"size), got {size} and {first}.",
                    kind="shared_dim",
                )
    for i, (given, expected) in enumerate(zip(inputs, spec.inputs)):
        if expected.values is None or given.values is None:
            continue
        for k, value in enumerate(given.values):
            if not expected.values.min <= value <= expected.values.max:
                label = tensor_label("input", i, spec.inputs)
                raise value_error(label, value, _position(k, given.shape), expected.values)


def value_error(label: str, value: int, position: tuple[int, ...], allowed: ValueRange) -> InputError:
    """The one-line error for the input ``label`` names (``tensor_label``) holding
    ``value`` at ``position``, outside ``allowed`` (kind "value").
    cpp_runtime/core/validation.cpp words it alike."""
    return InputError(
        f"{label}: value {value} at {list(position)} is outside {allowed} (this input indexes: "
        f"{allowed.why}). Pass values in {allowed}.",
        kind="value",
    )


def _position(k: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index tuple of element ``k`` (row-major) of a tensor of ``shape``."""
    position = []
    for size in reversed(shape):
        position.append(k % size)
        k //= size
    return tuple(reversed(position))


def check_values(inputs: list, spec: PackageSpec) -> None:
    """Raise InputError (kind "value") for the first element, in row-major order, of
    an input with a recorded value range that lies outside it. Call after
    check_inputs passed (the dtypes match)."""
    for i, (tensor, expected) in enumerate(zip(inputs, spec.inputs)):
        allowed = expected.values
        if allowed is None or tensor.numel() == 0:
            continue
        outside = ((tensor < allowed.min) | (tensor > allowed.max)).flatten()
        if bool(outside.any()):
            k = int(outside.nonzero()[0, 0])
            value, position = int(tensor.flatten()[k]), _position(k, tuple(tensor.shape))
            raise value_error(tensor_label("input", i, spec.inputs), value, position, allowed)


def validate_inputs(inputs: list, spec: PackageSpec) -> list:
    """Check the tensors (``check_inputs``, then ``check_values``) and return them
    ready for AOTI: lazy negation/conjugation applied and contiguous (AOTI reads
    dense row-major buffers)."""
    check_inputs([InputDesc.of(tensor) for tensor in inputs], spec)
    check_values(inputs, spec)
    return [tensor.resolve_conj().resolve_neg().contiguous() for tensor in inputs]
