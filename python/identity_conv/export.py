"""Stage 1: torch.export of a model, and what the exported graph calls."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .errors import ExportError
from .package import DimSpec, TensorSpec, dtype_name
from .user_model import DynamicDim

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
    dynamic_dims: Sequence[DynamicDim] = (),
) -> torch.export.ExportedProgram:
    """Export ``model`` with ``torch.export`` (non-strict).

    Args:
        model: the module to export.
        example_inputs: one tensor per forward argument.
        dynamic_dims: the dims that may vary at run time; every other dim is static.

    Raises:
        ExportError: with torch's message, when tracing fails or a dynamic dim names
            an input or dim the example inputs do not have.
    """
    dynamic_shapes = None
    if dynamic_dims:
        per_input: list[dict[int, object] | None] = [None] * len(example_inputs)
        for dynamic in dynamic_dims:
            dim = torch.export.Dim(dynamic.name, min=dynamic.min, max=dynamic.max)
            for i, d in dynamic.positions:
                if i >= len(example_inputs) or d >= example_inputs[i].dim():
                    raise ExportError(
                        f"--dynamic-dim {dynamic}: there is no dim {d} of input {i}; the model takes "
                        f"{len(example_inputs)} input(s) of shapes "
                        f"{', '.join(str(list(x.shape)) for x in example_inputs)}"
                    )
                per_input[i] = {**(per_input[i] or {}), d: dim}
        dynamic_shapes = tuple(per_input)
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


_REGISTERED_AT = re.compile(r"registered at (.+?):(\d+)")
_KERNEL_LINE = re.compile(r"^(\w+)(?:\[alias\])?: registered at (.+?):\d+")
# Keys whose kernel runs an op at inference on each device, besides the backend's own.
_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")


def python_only_ops(ops: Sequence[str], device: str) -> dict[str, str]:
    """The ops among ``ops`` that the C++ runtime could not run, with the reason.

    An op needs a schema defined in C++ and a C++ kernel for the package's device
    (or a composite one). Ops made with ``torch.library.custom_op`` or ``Library.define``
    from Python have neither, and the C++ runtime has no Python to run them.

    Args:
        ops: qualified names, ``ns::op``.
        device: the package's device, ``cpu`` or ``cuda``.

    Returns:
        ``{op: reason}`` for each op that is Python-only; empty if all can run in C++.
    """
    backend = "CUDA" if device.startswith("cuda") else "CPU"
    found = {}
    for op in ops:
        dump = torch._C._dispatch_dump(op)
        schema = next((line for line in dump.splitlines() if line.startswith("debug:")), "")
        match = _REGISTERED_AT.search(schema)
        if match and match.group(1).endswith(".py"):
            found[op] = "it was defined from Python (torch.library.custom_op or torch.library.Library), with no C++ schema"
            continue
        kernels = {}
        for line in dump.splitlines():
            kernel = _KERNEL_LINE.match(line)
            if kernel:
                kernels[kernel.group(1)] = kernel.group(2)
        native = [key for key in (backend, *_COMPOSITE_KEYS) if key in kernels and not kernels[key].endswith(".py")]
        if not native:
            found[op] = f"it has no C++ kernel for {backend} (kernels: {', '.join(sorted(kernels)) or 'none'})"
    return found
