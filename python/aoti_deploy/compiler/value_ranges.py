"""Which values each integer input may hold: export follows every user input through
shape-only ops to the index-like ops it feeds (embedding, index_select, gather,
tensor indexing), and takes the bound from the indexed tensor's shape. Compiled
kernels check indices inside OpenMP regions, where an error aborts the process, so
the runners refuse an input outside its range before the package runs."""

from __future__ import annotations

import dataclasses

from collections.abc import Mapping

import torch

from ..errors import InputError
from ..package.spec import VALUE_DTYPES, TensorSpec, ValueRange

aten = torch.ops.aten

# Ops whose output holds only values of their first argument (a view, a copy, a part).
_SHAPE_ONLY = {
    aten.view, aten._unsafe_view, aten.reshape, aten.unsqueeze, aten.squeeze, aten.expand, aten.slice,
    aten.select, aten.permute, aten.transpose, aten.t, aten.clone, aten.contiguous, aten.alias,
    aten.flatten, aten.unflatten, aten.narrow, aten.detach, aten.lift_fresh_copy, aten.view_as,
    aten.expand_as, aten.reshape_as,
}
# Dtype conversions keep the values when the new integer dtype holds every old one.
_CONVERSIONS = {aten._to_copy, aten.to}
DECLARED = "a range given at export"


def record_value_ranges(
    program: torch.export.ExportedProgram,
    inputs: list[TensorSpec],
    declared: Mapping[int, tuple[int, int]] | None = None,
) -> list[TensorSpec]:
    """``inputs`` (the program's user inputs, in order) with the value range of each
    integer input that indexes a tensor, intersected with the ranges ``declared``
    (input index -> inclusive (min, max)) for inputs the analysis cannot follow.

    Raises:
        InputError: a declared range for an input that does not exist, is not an
            integer input, is empty, or leaves no value the recorded uses accept.
    """
    found = value_ranges(program)
    declared = dict(declared or {})
    for i, (low, high) in declared.items():
        if not 0 <= i < len(inputs):
            raise InputError(f"--input-values {i}={low}:{high}: the model has {len(inputs)} input(s), numbered from 0")
        if inputs[i].dtype not in VALUE_DTYPES:
            raise InputError(
                f"--input-values {i}={low}:{high}: input {i} is {inputs[i].dtype}; a value range applies to an "
                f"integer input ({', '.join(VALUE_DTYPES)})"
            )
        lowest, highest = VALUE_DTYPES[inputs[i].dtype]
        if not lowest <= low <= high <= highest:
            raise InputError(
                f"--input-values {i}={low}:{high}: expected MIN <= MAX within {inputs[i].dtype}'s {lowest}..{highest}"
            )
        given = ValueRange(low, high, DECLARED)
        if i not in found:
            found[i] = given
            continue
        both = _intersect(found[i], given)
        if both is None:
            raise InputError(
                f"--input-values {i}={low}:{high}: no value in it is valid where input {i} indexes a tensor; "
                f"give a range within {found[i]} ({found[i].why})"
            )
        found[i] = both
    return [
        dataclasses.replace(spec, values=found.get(i, spec.values)) for i, spec in enumerate(inputs)
    ]


def value_ranges(program: torch.export.ExportedProgram) -> dict[int, ValueRange]:
    """The value range of each user input that reaches an index-like op through
    shape-only ops, by input position. Several uses intersect; an input with no
    value that every use accepts (an empty table) is left out."""
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    # Which user input each node's values come from, unchanged.
    origin: dict[torch.fx.Node, int] = {}
    ranges: dict[int, ValueRange | None] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and _integer(node):
            origin[node] = user_inputs.index(node.name)
            continue
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        packet = node.target.overloadpacket
        if packet in _SHAPE_ONLY or (packet in _CONVERSIONS and _widens(node)):
            source = node.args[0] if node.args else None
            if source in origin and _integer(node):
                origin[node] = origin[source]
            continue
        for index, allowed in _index_uses(node, program):
            if index in origin:
                i = origin[index]
                ranges[i] = _intersect(ranges[i], allowed) if i in ranges else allowed
    return {i: allowed for i, allowed in ranges.items() if allowed is not None}


def _index_uses(node: torch.fx.Node, program: torch.export.ExportedProgram) -> list[tuple[object, ValueRange]]:
    """(index argument, the values it may hold) for each index the op reads."""
    packet = node.target.overloadpacket
    args = node.args
    if packet is aten.embedding and len(args) >= 2:
        rows = _upper_size(args[0], 0, program)
        if rows is None:
            return []
        return [(args[1], ValueRange(0, rows[0] - 1, f"embedding rows 0..{rows[0] - 1}"))]
    if packet in (aten.index_select, aten.gather) and len(args) >= 3:
        name = "index_select over" if packet is aten.index_select else "gather along"
        dim = _dim(args[0], args[1])
        size = None if dim is None else _upper_size(args[0], dim, program)
        if size is None:
            return []
        return [(args[2], ValueRange(0, size[0] - 1, f"{name} dim {dim} of {size[1]}"))]
    if packet is aten.index and node.target._overloadname == "Tensor" and len(args) >= 2:
        uses = []
        for dim, index in enumerate(args[1]):
            size = _upper_size(args[0], dim, program) if index is not None else None
            if size is not None:
                why = f"tensor indexing of dim {dim} of {size[1]}, negatives wrap"
                uses.append((index, ValueRange(-size[0], size[0] - 1, why)))
        return uses
    return []


def _upper_size(tensor: object, dim: int, program: torch.export.ExportedProgram) -> tuple[int, str] | None:
    """The size of ``dim`` of a graph tensor, and how to name it: a fixed size, else
    the upper bound torch.export proved for its symbol; None when there is none."""
    from torch.utils._sympy.value_ranges import bound_sympy

    value = getattr(tensor, "meta", {}).get("val")
    if not isinstance(value, torch.Tensor) or not 0 <= dim < value.dim():
        return None
    size = value.shape[dim]
    if isinstance(size, torch.SymInt) and size.node.expr.is_number:
        size = int(size.node.expr)
    if isinstance(size, int):
        return (size, f"size {size}") if size > 0 else None
    upper = bound_sympy(size.node.expr, program.range_constraints).upper
    if not upper.is_Integer or int(upper) <= 0:
        return None
    return int(upper), f"size up to {int(upper)}"


def _dim(tensor: object, dim: object) -> int | None:
    value = getattr(tensor, "meta", {}).get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(dim, int):
        return None
    return dim % value.dim() if value.dim() else None


def _integer(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and str(value.dtype).removeprefix("torch.") in VALUE_DTYPES


def _widens(node: torch.fx.Node) -> bool:
    """A conversion whose integer output dtype holds every value of its integer input."""
    source = node.args[0] if node.args else None
    before = getattr(source, "meta", {}).get("val")
    after = node.meta.get("val")
    if not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor):
        return False
    old = VALUE_DTYPES.get(str(before.dtype).removeprefix("torch."))
    new = VALUE_DTYPES.get(str(after.dtype).removeprefix("torch."))
    return old is not None and new is not None and new[0] <= old[0] and old[1] <= new[1]


def _intersect(a: ValueRange | None, b: ValueRange) -> ValueRange | None:
    if a is None:
        return None
    low, high = max(a.min, b.min), min(a.max, b.max)
    if low > high:
        return None
    whys = [why for why in dict.fromkeys((a.why, b.why)) if why]
    return ValueRange(low, high, "; ".join(whys))
