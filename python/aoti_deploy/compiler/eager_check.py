"""The check of a package (or an ONNX file) against eager: the example call, and,
with dynamic dims, a call of other sizes, each output compared under the tolerance;
and the checks as a package records them, read back for a compile-cache hit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..models.call import CallInputs
from ..models.example import seeded_input
from ..models.user import DynamicDim, flatten_outputs
from ..package.dtypes import DTYPES, INTEGER_DTYPES, dtype_name
from ..package.spec import PackageSpec
from ..verify.bits import BitReport
from ..verify.tolerance import Comparison, Tolerance, compare_outputs, output_labels

# (what was compared, its comparison), e.g. ("eager vs package [1, 3, 224, 224]", ...)
Check = tuple[str, Comparison]


def spec_dynamic_dims(spec: PackageSpec) -> list[DynamicDim]:
    """The package's dynamic dims as the spec records them: each group of shared
    positions as one, every other non-static dim alone. The Python API gives its
    dynamic shapes in torch's own form; this is what they came to."""
    dims: list[DynamicDim] = []
    grouped = {position for group in spec.shared_dims for position in group}
    for group in spec.shared_dims:
        i, d = group[0]
        dim = spec.inputs[i].dims[d]
        dims.append(DynamicDim(tuple(group), dim.min, dim.max))
    for i, tensor in enumerate(spec.inputs):
        for d, dim in enumerate(tensor.dims):
            if not dim.is_static and (i, d) not in grouped:
                dims.append(DynamicDim(((i, d),), dim.min, dim.max))
    return dims


def second_inputs(
    inputs: list[torch.Tensor], dynamic_dims: list[DynamicDim], seed: int
) -> list[torch.Tensor] | None:
    """Random inputs of other sizes in the dynamic ranges, to prove the package is
    not specialised to the example. None without dynamic dims, or when an input's
    dtype has no random values (complex, float8).

    With floating inputs only, each dynamic dim is at its minimum (or one above the
    example, if that is the minimum). With an integer or bool input, each dynamic
    dim is one above the example where the range allows (an index valid into a dim
    of the example's size stays valid in a larger one; a smaller one could make eager
    raise, or a kernel abort), and each integer input draws its values between the
    example's smallest and largest (bool: 0 and 1): a value range the package records
    is an interval, so it holds them."""
    dtypes = [dtype_name(x.dtype) for x in inputs]
    if not dynamic_dims or not all(dtype in DTYPES or dtype in INTEGER_DTYPES for dtype in dtypes):
        return None
    grow = any(dtype in INTEGER_DTYPES for dtype in dtypes)
    shapes = [list(x.shape) for x in inputs]
    for dynamic in dynamic_dims:
        i, d = dynamic.positions[0]
        above = shapes[i][d] + 1 if dynamic.max is None or shapes[i][d] < dynamic.max else None
        # The range holds two sizes or more, so one of these differs from the example.
        size = above if (grow or dynamic.min == shapes[i][d]) and above is not None else dynamic.min
        for i, d in dynamic.positions:
            shapes[i][d] = size
    drawn = []
    for i, (shape, x, dtype) in enumerate(zip(shapes, inputs, dtypes)):
        span = None
        if dtype in INTEGER_DTYPES and dtype != "bool" and x.numel():
            as_int64 = x.to(torch.int64)  # min/max are not implemented for every integer dtype
            span = (int(as_int64.min()), int(as_int64.max()))
        drawn.append(seeded_input(tuple(shape), dtype, str(x.device), seed + 1 + i, span))
    return drawn


def verify_against_eager(
    model: nn.Module,
    call: CallInputs,
    dynamic_dims: list[DynamicDim],
    seed: int,
    run: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    what: str,
    label: str,
    tolerance: Tolerance,
    spec: PackageSpec,
) -> tuple[list[Check], list[torch.Tensor], list[torch.Tensor]]:
    """Run ``run`` on the call's tensors (and, with dynamic dims, on tensors of
    other sizes) and compare each output with eager's under ``tolerance``. Each check
    is labelled with the shapes and the output, as the runners name it ("output
    'scores'" when the model returns its outputs by name, "output[1]" else; nothing
    for a lone unnamed output).

    Returns:
        The labelled comparisons, and ``run``'s and eager's outputs for the example
        call.
    """
    checks: list[Check] = []
    example_outputs: list[torch.Tensor] = []
    reference_outputs: list[torch.Tensor] = []
    inputs = call.tensors()
    runs = [inputs] + ([more] if (more := second_inputs(inputs, dynamic_dims, seed)) else [])
    for run_inputs in runs:
        with torch.no_grad():
            eager = flatten_outputs(call.with_tensors(run_inputs).call(model))
        outputs = run(list(run_inputs))
        shapes = " ".join(str(list(x.shape)) for x in run_inputs)
        named = bool(spec.named_outputs(len(eager)))
        outputs_shown = [f" {shown}" if named or len(eager) > 1 else "" for shown in output_labels(spec, len(eager))]
        checks += compare_outputs(
            outputs, eager, tolerance, lambda j: f"eager vs {label} {shapes}{outputs_shown[j]}", what, "eager")
        reference_outputs = reference_outputs or eager
        example_outputs = example_outputs or outputs
    return checks, example_outputs, reference_outputs


def recorded_check(comparison: Comparison) -> dict[str, Any]:
    """A comparison as the spec's ``verified`` entry keeps it, for a cache hit's report."""
    return {
        "bits": dataclasses.asdict(comparison.bits),
        "dtype": dtype_name(comparison.dtype),
        "num_outside": comparison.num_outside,
        "first_outside": comparison.first_outside,
    }


def recorded_checks(spec: PackageSpec, tolerance: Tolerance) -> list[Check]:
    """The checks a cached package passed, from its ``verified`` entry.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: an entry of another form
            (e.g. from an older toolkit); the caller treats that as a cache miss.
    """
    checks = []
    for label, fields in spec.verified:
        bits = BitReport(**{**fields["bits"], "first_index": tuple(fields["bits"]["first_index"] or ()) or None})
        dtype = getattr(torch, fields["dtype"])
        checks.append((label, Comparison(bits, tolerance, dtype, fields["num_outside"], fields["first_outside"])))
    return checks
