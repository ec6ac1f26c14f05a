"""Stage 1: torch.export of a model, and what the exported graph calls."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ExportError
from ..package.dtypes import dtype_name
from ..package.spec import INT64_MAX, TENSOR_KIND, DimSpec, OpRef, TensorSpec
from ..models.user import DynamicDim
from .dynamic_dims import DimFix, constraint_fixes, dynamic_dim_option, untied_static_dims
from ..models.call import CallInputs
from .structure import bounded_names, input_names, output_names, returns_by_name

# Namespaces of ops that every libtorch has; anything else comes from a library.
# Ops libtorch itself registers, in C++: no op library provides them (an int8 package
# calls quantized::max_pool2d, for one).
_BUILTIN_NAMESPACES = {"aten", "prims", "higher_order", "prim", "_operator", "quantized", "_quantized", "onednn",
                       "mkldnn", "mkl"}


@dataclass
class GraphCalls:
    """The custom ops and torchbind classes an exported graph needs at run time."""

    ops: list[str]
    classes: list[str]
    # Each op's overloads as called, e.g. {"my_ops::identity_conv_op": [OpOverload]}.
    overloads: dict[str, list[torch._ops.OpOverload]] = field(default_factory=dict)

    def op_refs(self) -> list[OpRef]:
        """Each op with each overload the graph calls (the name alone, any overload,
        where the overloads are not known)."""
        refs = []
        for op in self.ops:
            overloads = self.overloads.get(op)
            refs += [OpRef(op, overload._overloadname) for overload in overloads] if overloads else [OpRef(op, None)]
        return refs


def export_model(
    model: nn.Module,
    example_inputs: tuple[torch.Tensor, ...] | CallInputs,
    dynamic_dims: Sequence[DynamicDim] = (),
    dynamic_shapes: Any = None,
) -> torch.export.ExportedProgram:
    """Export ``model`` with ``torch.export`` (non-strict).

    Args:
        model: the module to export.
        example_inputs: one tensor per forward argument, or the whole call (args
            and kwargs, nested, with Python scalars).
        dynamic_dims: the dims that may vary at run time (the CLI's --dynamic-dim,
            over the call's tensors in order); every other dim is static.
        dynamic_shapes: torch.export's own ``dynamic_shapes`` (``Dim`` objects in a
            dict, tuple or list), as the Python API takes it; not with dynamic_dims.

    Raises:
        ExportError: with torch's message, when tracing fails or a dynamic dim names
            an input or dim the example inputs do not have; with the --dynamic-dim to
            pass instead, when torch refuses the dynamic dims, or when the model needs
            a dim left static to follow a dynamic one (dynamic_dims.py).
    """
    call = example_inputs if isinstance(example_inputs, CallInputs) else CallInputs(tuple(example_inputs))
    # AOTI compiles the example's strides in, and the runtimes pass contiguous
    # tensors: trace contiguous copies, or a package from a transposed example
    # reads its inputs with the wrong strides.
    call = call.map_tensors(lambda x: x.contiguous())
    if dynamic_dims:
        tensors = call.tensors()
        per_input: list[dict[int, object] | None] = [None] * len(tensors)
        for dynamic in dynamic_dims:
            dim = torch.export.Dim(dynamic.name, min=dynamic.min, max=dynamic.max)
            for i, d in dynamic.positions:
                if i >= len(tensors) or d >= tensors[i].dim():
                    raise ExportError(
                        f"--dynamic-dim {dynamic}: there is no dim {d} of input {i}; the model takes "
                        f"{len(tensors)} input(s) of shapes "
                        f"{', '.join(str(list(x.shape)) for x in tensors)}"
                    )
                per_input[i] = {**(per_input[i] or {}), d: dim}
        dynamic_shapes = _per_leaf_shapes(model, call, per_input)
    try:
        program = torch.export.export(model, call.args, call.kwargs or None, dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as error:  # torch raises many unrelated types here
        if dynamic_dims and "Constraints violated" in str(error):
            fix = _dynamic_dim_fix(model, tuple(call.tensors()), dynamic_dims, str(error))
            if fix:
                raise ExportError(f"torch.export refused the dynamic dims: {fix}") from error
        hint = ""
        if type(error).__name__ == "UnsupportedOperatorException":
            hint = (
                f"\nThe op {error} has no fake (meta) kernel, which tracing needs: register one with "
                "torch.library.register_fake in a module and import it with --fake-module."
            )
        raise ExportError(f"torch.export failed: {type(error).__name__}: {error}{hint}") from error
    # torch.export accepts a dim left static that the model reads at a dynamic size.
    # The probes resize the call's tensors in place of the example's, whatever its structure.
    flat_model = model if len(call.tensors()) == len(call.leaves()) and not call.kwargs else (
        lambda *tensors: call.with_tensors(tensors).call(model))
    if untied := untied_static_dims(flat_model, call.tensors(), dynamic_dims):
        raise ExportError(
            "the dynamic dims leave a dim static that the model needs to follow a dynamic one: "
            + " ".join(_fix_text(fix) for fix in untied)
        )
    return program


def _fix_text(fix: DimFix) -> str:
    """One fix in the CLI's terms: the option given, why it fails, what to pass."""
    given = f"--dynamic-dim {fix.dim}"
    if fix.kind == "static":
        return f"{fix.reason}, so it cannot be dynamic; drop it from {given}."
    if fix.kind == "expression":
        return f"{given}: {fix.reason}, which a --dynamic-dim range cannot say; leave it static."
    if fix.kind == "tie":
        return f"{given}: {fix.reason}. Pass them together in one option: {dynamic_dim_option(fix)}"
    return f"{given}: {fix.reason}. Pass {dynamic_dim_option(fix)}"


def _per_leaf_shapes(model: nn.Module, call: CallInputs, per_tensor: list[dict[int, object] | None]) -> Any:
    """torch.export's dynamic_shapes for a call, from one entry per tensor leaf (in
    the package's order): the call's own structure with each tensor replaced by its
    dims and every other leaf by None; a tuple in argument order, or with keyword
    arguments a dict by argument name (bound to the model's signature)."""
    import inspect

    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten((call.args, call.kwargs))
    shapes = iter(per_tensor)
    args, kwargs = pytree.tree_unflatten(
        [next(shapes) if isinstance(leaf, torch.Tensor) else None for leaf in leaves], spec
    )
    if not kwargs:
        return tuple(args)
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError) as error:
        raise ExportError(f"the example call does not fit the model's forward: {error}") from error
    return dict(bound.arguments)


def _dynamic_dim_fix(
    model: nn.Module, example_inputs: tuple[torch.Tensor, ...], dynamic_dims: Sequence[DynamicDim],
    message: str = "",
) -> str:
    """What to pass instead of ``dynamic_dims`` that torch.export refused, in this
    tool's terms (torch's own suggestions name its Dim objects and draft_export).
    Found by exporting again with every dim left to torch (Dim.AUTO): dims the model
    ties to one size share a symbol there, and dims its code fixes are plain ints.
    Else torch's own ``message`` translated (dynamic_dims.constraint_fixes: the range
    that works and why, or a size the code fixes; torch calls a dim tied to a static
    one "specialized", which the Dim.AUTO export tells apart). "" when neither shows
    anything to fix."""
    translated = " ".join(_fix_text(fix) for fix in constraint_fixes(message, model, example_inputs, dynamic_dims))
    try:
        auto = tuple({d: torch.export.Dim.AUTO for d in range(x.dim())} for x in example_inputs)
        program = torch.export.export(model, example_inputs, dynamic_shapes=auto, strict=False)
    except Exception:  # the hint is a courtesy; torch's own error is reported then
        return translated
    sizes = _user_input_sizes(program)
    for dynamic in dynamic_dims:
        for i, d in dynamic.positions:
            size = sizes[i][d]
            if isinstance(size, int):
                return (
                    f"the model's code fixes input {i} dim {d} to {size}, so it cannot be dynamic; drop it from "
                    f"--dynamic-dim {dynamic}."
                )
            tied = [(j, e) for j, shape in enumerate(sizes) for e, other in enumerate(shape) if other == size]
            if not set(tied) <= set(dynamic.positions):
                others = ", ".join(f"input {j} dim {e}" for j, e in tied if (j, e) != (i, d))
                together = ",".join(f"{j}.{e}" for j, e in sorted(set(tied) | set(dynamic.positions)))
                return (
                    f"the model ties input {i} dim {d} to {others} (they must have one size), but --dynamic-dim "
                    f"{dynamic} gives {_positions_text(dynamic)} a size of its own. Pass them together in one "
                    f"option: --dynamic-dim {together}={str(dynamic).partition('=')[2]}"
                )
    return translated


def _positions_text(dynamic: DynamicDim) -> str:
    return " and ".join(f"input {i} dim {d}" for i, d in dynamic.positions)


def _user_input_sizes(program: torch.export.ExportedProgram) -> list[list[int | str]]:
    """Each user input's sizes: an int where the size is fixed, else its symbol's name
    (equal names: one size)."""
    user_inputs = input_names(program)
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    shapes: list[list[int | str]] = []
    for name in user_inputs:
        shape: list[int | str] = []
        for size in placeholders[name].meta["val"].shape:
            if isinstance(size, torch.SymInt) and size.node.expr.is_number:
                size = int(size.node.expr)
            shape.append(size if isinstance(size, int) else str(size.node.expr))
        shapes.append(shape)
    return shapes


def input_specs(program: torch.export.ExportedProgram) -> list[TensorSpec]:
    """The tensor user inputs as the exported program sees them, in the package's
    order, named as the model names them: each dim static, or the range torch.export
    proved for it. Python scalars are baked in, not inputs (structure.py)."""
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    names = input_names(program)
    return [
        dataclasses.replace(_tensor_spec(placeholders[name].meta["val"], program), name=shown)
        for name, shown in zip(names, bounded_names(names))
    ]


def output_specs(program: torch.export.ExportedProgram, kinds: Sequence[str] = ()) -> list[TensorSpec]:
    """The user outputs, flat in pytree order (as the package returns them): each dim
    static, or the range its size expression takes over the inputs' ranges, with its
    kind from ``kinds`` (``structure.scalar_outputs_as_tensors``, which made each Python
    scalar output a 0-d tensor). Empty if an output is not a tensor (None, an int, a
    SymInt left as it was): a partial list would misnumber the outputs."""
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    # The output node's values line up with output_specs: buffer mutations first, then
    # the user outputs.
    values = [
        getattr(value, "meta", {}).get("val")
        for spec, value in zip(program.graph_signature.output_specs, output_node.args[0])
        if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
    ]
    if not all(isinstance(value, torch.Tensor) for value in values):
        return []
    names = output_names(program.call_spec.out_spec) if program.call_spec.out_spec is not None else []
    if len(names) != len(values):
        names = [""] * len(values)
    kinds = list(kinds) if len(kinds) == len(values) else [TENSOR_KIND] * len(values)
    return [dataclasses.replace(_tensor_spec(value, program), name=name, kind=kind)
            for value, name, kind in zip(values, names, kinds)]


def outputs_by_name(program: torch.export.ExportedProgram, outputs: list[TensorSpec]) -> bool:
    """The spec's ``outputs_by_name``: the model returns its outputs by name
    (``returns_by_name``), and ``outputs`` (``output_specs``) records them, each named."""
    out_spec = program.call_spec.out_spec
    return bool(outputs) and all(t.name for t in outputs) and out_spec is not None and returns_by_name(out_spec)


def _tensor_spec(value: torch.Tensor, program: torch.export.ExportedProgram) -> TensorSpec:
    return TensorSpec(tuple(_dim_spec(size, program) for size in value.shape), dtype_name(value.dtype))


def _dim_spec(size: int | torch.SymInt, program: torch.export.ExportedProgram) -> DimSpec:
    """A size as a range: an int (or a symbolic size torch proved constant) is static;
    a symbolic one ranges over what its expression takes on the program's symbol
    ranges (an input's own symbol: exactly its range). A bound that is not an integer
    (int_oo: no upper bound) leaves that side open (max None: unbounded); sizes
    are >= 0 whatever the expression allows."""
    from torch.utils._sympy.value_ranges import bound_sympy

    if isinstance(size, torch.SymInt) and size.node.expr.is_number:
        size = int(size.node.expr)
    if isinstance(size, int):
        return DimSpec(size, size)
    bounds = bound_sympy(size.node.expr, program.range_constraints)
    low = int(bounds.lower) if bounds.lower.is_Integer else 0
    # A bound past int64 is unbounded too: no tensor has that many elements in a dim.
    high = int(bounds.upper) if bounds.upper.is_Integer and int(bounds.upper) < INT64_MAX else None
    return DimSpec(min(max(low, 0), INT64_MAX), None if high is None else max(high, 0))


def shared_dims(program: torch.export.ExportedProgram) -> list[list[tuple[int, int]]]:
    """Groups of (input, dim) positions that torch.export proved to be one size (the
    same symbol): a runner must see equal sizes there, or the compiled code reads
    out of bounds. Only groups of two or more positions."""
    user_inputs = input_names(program)
    placeholders = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    groups: dict[str, list[tuple[int, int]]] = {}
    for i, name in enumerate(user_inputs):
        for d, size in enumerate(placeholders[name].meta["val"].shape):
            if not isinstance(size, int):
                groups.setdefault(str(size.node.expr), []).append((i, d))
    return [positions for positions in groups.values() if len(positions) > 1]


def graph_calls(program: torch.export.ExportedProgram) -> GraphCalls:
    """List the custom ops and torchbind classes the graph calls, sorted, in the
    top-level graph and in every subgraph (e.g. the branches of torch.cond)."""
    ops: dict[str, list[torch._ops.OpOverload]] = {}
    classes: set[str] = set()
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
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
                    overloads = ops.setdefault(f"{namespace}::{node.target._opname}", [])
                    if node.target not in overloads:
                        overloads.append(node.target)
    # The torchbind class's methods call ops too, but the package runs them through
    # the class, so requiring the class is enough for them.
    return GraphCalls(sorted(ops), sorted(classes), ops)


def package_extern_ops(package_path: str | Path) -> list[OpRef]:
    """The custom ops a compiled package really calls at run time (through AOTI's
    proxy executor, listed in the package's ``*.wrapper.json``), with their overloads,
    sorted. A target there is ``ns::name`` for the default overload and
    ``ns::name.overload`` otherwise (``OpOverload.name()``). Ops that Inductor compiled
    into its own kernels are not among them."""
    ops: set[OpRef] = set()
    with zipfile.ZipFile(package_path) as archive:
        for name in archive.namelist():
            if not name.endswith(".wrapper.json"):
                continue
            for entry in json.loads(archive.read(name)).get("nodes", []):
                target = entry.get("node", {}).get("target", "")
                namespace = target.split("::")[0]
                if "::" in target and namespace not in _BUILTIN_NAMESPACES:
                    qualname, _, overload = target.partition(".")
                    ops.add(OpRef(qualname, overload or "default"))
    return sorted(ops, key=str)


def class_qualname(class_fqn: str) -> str:
    """``"__torch__.torch.classes.ns.Name"`` -> ``"ns::Name"``."""
    namespace, name = class_fqn.removeprefix("__torch__.torch.classes.").split(".", 1)
    return f"{namespace}::{name}"


def _torchbind_qualname(meta_val: object) -> str | None:
    """``CustomObjArgument(class_fqn="__torch__.torch.classes.ns.Name")`` -> ``"ns::Name"``."""
    class_fqn = getattr(meta_val, "class_fqn", None)
    return class_qualname(class_fqn) if class_fqn else None


_REGISTERED_AT = re.compile(r"registered at (.+?):(\d+)")
_KERNEL_LINE = re.compile(r"^(\w+)(?:\[alias\])?: registered at (.+?):\d+")
# Keys whose kernel runs an op at inference on every device, besides the backend's own.
_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")
_NOT_KERNELS = ("debug", "schema")


def _inductor_compiles(overload: torch._ops.OpOverload) -> bool:
    """Inductor lowers or decomposes this op into its own kernels: the package never
    calls it, so it needs no C++ kernel."""
    from torch._inductor.decomposition import decompositions
    from torch._inductor.lowering import fallbacks, lowerings

    # A fallback "lowering" is a call of the op itself (Inductor adds one per custom op).
    return (overload in lowerings and overload not in fallbacks) or overload in decompositions


def _resolve(op: OpRef) -> torch._ops.OpOverload | None:
    namespace, name = op.name.split("::", 1)
    packet = getattr(getattr(torch.ops, namespace), name, None)
    return getattr(packet, op.overload or "default", None) if packet is not None else None


def dispatch_dump(op: OpRef) -> str:
    """The dispatcher's own description of one overload: its schema registration
    ("debug: registered at FILE:LINE") and a "KEY: registered at FILE:LINE" line per
    kernel. torch._C._dispatch_dump is a debug format, not an API: the format this
    parser reads is pinned by tests/test_user_models.py::test_dispatch_dump_format,
    checked on torch 2.13.0 and 2.14.1."""
    return torch._C._dispatch_dump(op.name if op.overload in (None, "default") else f"{op.name}.{op.overload}")


def python_only_ops(ops: list[OpRef], device: str) -> dict[str, str]:
    """The ops (of ``ops``, each overload on its own) that the C++ runtime could not
    run, by name, with the reason.

    An overload is Python-only if its schema was defined from Python
    (``torch.library.custom_op``, ``Library.define``), or if its kernels for the
    package's device (or composite ones) were all registered from Python. Ops that
    Inductor compiles into its own kernels are exempt: the package never calls them.

    Args:
        ops: from ``GraphCalls.op_refs`` or ``package_extern_ops``.
        device: the package's device, ``cpu`` or ``cuda``.

    Returns:
        ``{op name: reason}`` for each op with a Python-only overload; empty if all
        can run in C++.
    """
    backend = "CUDA" if device.startswith("cuda") else "CPU"
    found = {}
    for op in ops:
        overload = _resolve(op)
        if overload is not None and _inductor_compiles(overload):
            continue
        overload_names = [op.overload] if op.overload is not None else _overload_names(op)
        for name in overload_names:
            reason = _python_only_reason(dispatch_dump(OpRef(op.name, name)), backend)
            if reason:
                found[op.name] = reason
                break
    return found


def _overload_names(op: OpRef) -> list[str]:
    namespace, name = op.name.split("::", 1)
    packet = getattr(getattr(torch.ops, namespace), name, None)
    return list(packet.overloads()) if packet is not None else ["default"]


def _python_only_reason(dump: str, backend: str) -> str:
    """Why the dumped overload cannot run without Python, or "" if it can."""
    schema = next((line for line in dump.splitlines() if line.startswith("debug:")), "")
    match = _REGISTERED_AT.search(schema)
    if match and match.group(1).endswith(".py"):
        return "it was defined from Python (torch.library.custom_op or torch.library.Library), with no C++ schema"
    kernels: dict[str, str] = {}
    for line in dump.splitlines():
        kernel = _KERNEL_LINE.match(line)
        if kernel and kernel.group(1) not in _NOT_KERNELS:
            kernels[kernel.group(1)] = kernel.group(2)
    # The device's own keys (CPU, QuantizedCPU, SparseCPU, ...) and composites.
    usable = {key: where for key, where in kernels.items() if backend in key or key in _COMPOSITE_KEYS}
    if usable and all(where.endswith(".py") for where in usable.values()):
        return f"its {', '.join(sorted(usable))} kernel(s) were registered from Python"
    return ""
