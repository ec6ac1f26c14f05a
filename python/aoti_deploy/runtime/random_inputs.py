"""Seeded random inputs for a package, when the user gives no tensor file: the shapes
asked for (--input-shape, checked against the spec), else the recorded example shapes
(else each dynamic dim at its minimum); standard normal values drawn in float32 on the
CPU, one input after the other from one generator, then cast, so every runtime draws
the same bits. An integer or bool input draws uniform int64 values (``random_``) from
the same generator, then is cast: in its recorded value range, else 0 or 1
(DEFAULT_RANDOM_VALUES). Pairs with
cpp_runtime/core/random_inputs.cpp (tests/contract/random_vectors.json)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from ..package.dtypes import DEFAULT_RANDOM_VALUES, DTYPES, INTEGER_DTYPES
from ..package.spec import INT64_MAX, PackageSpec, TensorSpec
from .validation import InputDesc, check_inputs


def random_input_shapes(spec: PackageSpec, shapes: Sequence[tuple[int, ...]] | None = None) -> list[tuple[int, ...]]:
    """The shape of each random input.

    Args:
        spec: the package's spec.
        shapes: the shapes asked for, one per input; None for the recorded ones.

    Raises:
        InputError: kind random_dtype when an input's dtype has no random values here;
            for ``shapes`` the package does not accept, the kind input validation
            gives (count, rank, dim, shared_dim), the message led by --input-shape.
    """
    for tensor_spec in spec.inputs:
        if tensor_spec.dtype not in DTYPES and tensor_spec.dtype not in INTEGER_DTYPES:
            raise InputError(
                f"cannot generate a random input of dtype {tensor_spec.dtype} (random inputs are "
                f"{', '.join(DTYPES)}, or bool or integer); pass --inputs FILE.",
                kind="random_dtype",
            )
    if shapes is not None:
        # The inputs these shapes would make, checked as any input is (the count first).
        dtypes = [t.dtype for t in spec.inputs] + [""] * len(shapes)
        try:
            check_inputs([InputDesc(dtypes[i], tuple(shape), spec.device) for i, shape in enumerate(shapes)], spec)
        except InputError as error:
            hint = " Give one --input-shape per input, in order." if error.kind == "count" else ""
            raise InputError(f"--input-shape: {error}{hint}", kind=error.kind) from None
        return [tuple(shape) for shape in shapes]
    return [
        spec.example_shapes[i] if spec.example_shapes else tuple(d.min for d in tensor_spec.dims)
        for i, tensor_spec in enumerate(spec.inputs)
    ]


def make_random_inputs(spec: PackageSpec, seed: int, shapes: Sequence[tuple[int, ...]] | None = None) -> list:
    """The random inputs (of ``shapes``, else the recorded shapes), on the package's device."""
    return [x.to(spec.device) for x in random_cpu_inputs(spec, seed, shapes)]


def random_cpu_inputs(spec: PackageSpec, seed: int, shapes: Sequence[tuple[int, ...]] | None = None) -> list:
    """The same random inputs as ``make_random_inputs``, on the CPU (e.g. to send to a
    server)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [
        _draw(shape, tensor_spec, generator)
        for shape, tensor_spec in zip(random_input_shapes(spec, shapes), spec.inputs)
    ]


def _draw(shape: tuple[int, ...], tensor_spec: TensorSpec, generator: object) -> object:
    import torch

    if tensor_spec.dtype in DTYPES:
        return torch.randn(shape, generator=generator).to(DTYPES[tensor_spec.dtype])
    # random_'s upper bound is exclusive; None draws up to int64's largest value.
    values = tensor_spec.values
    low, high = DEFAULT_RANDOM_VALUES if values is None else (values.min, values.max)
    upper = None if high == INT64_MAX else high + 1
    drawn = torch.empty(shape, dtype=torch.int64).random_(low, upper, generator=generator)
    return drawn.to(INTEGER_DTYPES[tensor_spec.dtype])
