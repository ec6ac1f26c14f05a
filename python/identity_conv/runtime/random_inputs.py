"""Seeded random inputs for a package, when the user gives no tensor file: the
recorded example shapes (else each dynamic dim at its minimum), standard normal
values drawn in float32 on the CPU then cast, so every runtime draws the same bits.
Pairs with cpp_runtime/core/random_inputs.cpp (tests/contract/random_vectors.json)."""

from __future__ import annotations

from ..errors import InputError
from ..package.dtypes import DTYPES
from ..package.spec import PackageSpec


def random_input_shapes(spec: PackageSpec) -> list[tuple[int, ...]]:
    """The shape of each random input.

    Raises:
        InputError (kind random_dtype): an input's dtype has no random values here.
    """
    shapes = []
    for i, tensor_spec in enumerate(spec.inputs):
        if tensor_spec.dtype not in DTYPES:
            raise InputError(
                f"cannot generate a random input of dtype {tensor_spec.dtype} (random inputs are "
                f"{', '.join(DTYPES)}); pass --inputs FILE.",
                kind="random_dtype",
            )
        shapes.append(spec.example_shapes[i] if spec.example_shapes else tuple(d.min for d in tensor_spec.dims))
    return shapes


def make_random_inputs(spec: PackageSpec, seed: int) -> list:
    """The random inputs, on the package's device."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(shape, generator=generator).to(DTYPES[tensor_spec.dtype]).to(spec.device)
        for shape, tensor_spec in zip(random_input_shapes(spec), spec.inputs)
    ]
