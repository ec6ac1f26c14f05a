"""Stage 1: torch.export of a model, and what the exported graph calls."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .errors import ExportError
from .package import DimSpec, TensorSpec, dtype_name

# Namespaces of ops that every libtorch has; anything else comes from a library.
_BUILTIN_NAMESPACES = {"aten", "prims", "higher_order", "prim", "_operator"}


@dataclass
class GraphCalls:
    """The custom ops and torchbind classes an exported graph needs at run time."""

    ops: list[str]
    classes: list[str]


def export_model(
    model: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    dynamic_dims: dict[int, tuple[str, int, int]] | None = None,
) -> torch.export.ExportedProgram:
    """Export ``model`` with ``torch.export`` (non-strict).

    Args:
        model: the module to export.
        example_inputs: one tensor per forward argument.
        dynamic_dims: for the first input, ``{dim: (name, min, max)}`` of the dims
            that may vary at run time; the others are static.

    Raises:
        ExportError: with torch's message, when tracing fails.
    """
    dynamic_shapes = None
    if dynamic_dims:
        first = {dim: torch.export.Dim(name, min=low, max=high) for dim, (name, low, high) in dynamic_dims.items()}
        dynamic_shapes = (first,) + (None,) * (len(example_inputs) - 1)
    try:
        return torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as error:  # torch raises many unrelated types here
        raise ExportError(f"torch.export failed: {type(error).__name__}: {error}") from error


def input_specs(program: torch.export.ExportedProgram) -> list[TensorSpec]:
    """The user inputs as the exported program sees them: each dim static, or the
    range torch.export proved for it."""
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    specs = []
    for name in user_inputs:
        value = placeholders[name].meta["val"]
        dims = []
        for size in value.shape:
            if isinstance(size, int):
                dims.append(DimSpec(size, size))
                continue
            bounds = program.range_constraints[size.node.expr]
            dims.append(DimSpec(int(bounds.lower), int(bounds.upper)))
        specs.append(TensorSpec(tuple(dims), dtype_name(value.dtype)))
    return specs


def graph_calls(program: torch.export.ExportedProgram) -> GraphCalls:
    """List the custom ops and torchbind classes the graph calls, sorted."""
    ops: set[str] = set()
    classes: set[str] = set()
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.higher_order.call_torchbind:
            qualname = _torchbind_qualname(node.args[0].meta.get("val"))
            if qualname:
                classes.add(qualname)
            continue
        if isinstance(node.target, torch._ops.OpOverload):
            namespace = node.target.namespace
            if namespace not in _BUILTIN_NAMESPACES:
                ops.add(f"{namespace}::{node.target._opname}")
    # The torchbind class's methods call ops too, but the package runs them through
    # the class, so requiring the class is enough for them.
    return GraphCalls(sorted(ops), sorted(classes))


def _torchbind_qualname(meta_val: object) -> str | None:
    """``CustomObjArgument(class_fqn="__torch__.torch.classes.ns.Name")`` -> ``"ns::Name"``."""
    class_fqn = getattr(meta_val, "class_fqn", None)
    if not class_fqn:
        return None
    namespace, name = class_fqn.removeprefix("__torch__.torch.classes.").split(".", 1)
    return f"{namespace}::{name}"
