"""The ONNX deploy target, export side: torch.export, then ``torch.onnx.export`` with
a translation for every custom op, then ``onnx.checker``. Needs the optional extra
(``pip install -e '.[onnx]'``), imported only inside the functions that use it, so
this module loads without the extra.

Two modes:

- ``portable``: every custom op (and routed class method) becomes standard ONNX ops
  through its registered translation (onnx_translations.py). Any ONNX runtime runs
  the file.
- ``custom-domain``: every custom op ``ns::name`` becomes a node ``name`` in the ONNX
  domain ``ns``, its tensor arguments as inputs and its int/float/str arguments
  (for a class, its flattened state) as attributes. Only a runtime that is given
  implementations of those nodes runs the file (onnx_runtime.py gives onnxruntime
  the op library's own kernels).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import torch
from torch import nn

from ..runtime.onnx_extra import require_onnx
from ..errors import AotiDeployError, ExportError
from .export import (
    class_qualname, export_model, graph_calls, input_specs, output_specs, outputs_by_name, shared_dims,
)
from .onnx_translations import class_routes, portable_translation
from .options import ONNX_MODES
from ..package.spec import OpRef, PackageSpec
from ..models.user import DynamicDim

# The version of the custom ONNX domains the custom-domain mode writes.
CUSTOM_DOMAIN_VERSION = 1
# dtypes the ONNX target takes: numpy (the way into onnxruntime) has no bfloat16.
ONNX_DTYPES = (torch.float16, torch.float32, torch.float64)


@dataclass
class OnnxExport:
    """What ``export_onnx`` wrote."""

    path: Path
    spec: PackageSpec
    mode: str
    ops: list[str]
    # "ns::Class.method -> ns::op" for each routed torchbind call.
    routes: list[str]
    graph: str
    # (domain, op_type) of every node of the file, in order.
    nodes: list[tuple[str, str]]


@contextlib.contextmanager
def routed_classes(model: nn.Module) -> Iterator[list[str]]:
    """Replace, for the duration, every torchbind object held by ``model`` (or its
    submodules) with a proxy whose routed methods call the class's op with the
    object's flattened state. Yields "class.method -> op" for each route used.

    Raises:
        ExportError: an object's class has no route registered.
    """
    swapped: list[tuple[nn.Module, str, Any]] = []
    routes: list[str] = []
    try:
        for module in model.modules():
            for name, value in list(vars(module).items()):
                if not isinstance(value, torch.ScriptObject):
                    continue
                class_name = class_qualname(value._type().qualified_name())
                methods = class_routes(class_name)
                if not methods:
                    raise ExportError(
                        f"the model holds a torchbind object of class {class_name} (attribute {name!r}), which has "
                        "no ONNX route: an ONNX graph has no stateful objects. Register an op that takes the "
                        "method's arguments and the object's flattened state with "
                        "aoti_deploy.compiler.onnx_translations.register_onnx_class_route(class, method, op)."
                    )
                swapped.append((module, name, value))
                setattr(module, name, _ClassProxy(value, methods))
                routes += [f"{class_name}.{method} -> {op}" for method, op in sorted(methods.items())]
        yield sorted(set(routes))
    finally:
        for module, name, value in reversed(swapped):
            setattr(module, name, value)


class _ClassProxy:
    """Stands in for a torchbind object during the ONNX export."""

    def __init__(self, obj: torch.ScriptObject, methods: dict[str, str]) -> None:
        self._state = dict(obj.__obj_flatten__())
        for method, op in methods.items():
            setattr(self, method, self._caller(op))

    def _caller(self, op: str) -> Callable[..., Any]:
        namespace, name = op.split("::")
        target = getattr(getattr(torch.ops, namespace), name)
        return lambda *args: target(*args, **self._state)


def _with_signature(fn: Callable[..., Any], schema: torch._C.FunctionSchema) -> Callable[..., Any]:
    """Give ``fn(*args)`` the op's parameter names: the exporter reads a
    translation's signature to match the graph's arguments to it."""
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(arg.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for arg in schema.arguments]
    )
    return fn


def _portable(overload: torch._ops.OpOverload, translation: Callable[..., Any]) -> Callable[..., Any]:
    from onnxscript import opset18

    return _with_signature(lambda *args: translation(opset18, *args), overload._schema)


_ATTRIBUTE_TYPES = {"int": "INT", "float": "FLOAT", "str": "STRING", "bool": "INT"}


def _in_place_error(op: str, argument: str) -> str:
    """Both modes refuse an op that writes its argument, so neither may point to the other."""
    return (
        f"{op} writes its argument {argument!r} in place, and ONNX has no in-place ops: neither ONNX mode "
        "(portable or custom-domain) can export it. Export a model that calls a functional op (for the "
        "IdentityModel: --variant functional)."
    )


def _written_argument(overload: torch._ops.OpOverload) -> str | None:
    """The name of the first argument ``overload`` writes in place, if any."""
    for arg in overload._schema.arguments:
        if arg.alias_info is not None and arg.alias_info.is_write:
            return arg.name
    return None


def _custom_domain(overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """The translation that writes ``overload`` as one node of its namespace's
    domain, after registering an ONNX schema for it (so ``onnx.checker`` and the
    exporter know the node's inputs, attributes and types)."""
    import onnx
    from onnx.defs import OpSchema
    from onnxscript import values

    schema = overload._schema
    namespace, name = overload.namespace, overload._opname
    op = f"{namespace}::{name}"
    if overload._overloadname != "default":
        raise ExportError(f"{op}.{overload._overloadname}: the custom-domain mode writes default overloads only")
    tensors, attributes = [], []
    for arg in schema.arguments:
        kind = str(arg.type)
        if arg.alias_info is not None and arg.alias_info.is_write:
            raise ExportError(_in_place_error(op, arg.name))
        if kind == "Tensor":
            tensors.append(arg.name)
        elif kind in _ATTRIBUTE_TYPES:
            attributes.append((arg.name, _ATTRIBUTE_TYPES[kind]))
        else:
            raise ExportError(
                f"{op}: argument {arg.name!r} of type {kind} cannot be an ONNX input or attribute "
                "(tensors, int, float, bool and str can)"
            )
    if not tensors:
        raise ExportError(f"{op}: the custom-domain mode writes ops that take at least one tensor")
    if any(str(ret.type) != "Tensor" for ret in schema.returns) or not schema.returns:
        raise ExportError(f"{op}: the custom-domain mode writes ops that return tensors; it returns {schema.returns}")
    float_types = ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"]
    if not onnx.defs.has(name, CUSTOM_DOMAIN_VERSION, namespace):
        onnx.defs.register_schema(
            OpSchema(
                name,
                namespace,
                CUSTOM_DOMAIN_VERSION,
                doc=f"The custom op {op}; its runtime implementation comes from the op library.",
                inputs=[OpSchema.FormalParameter(t, "T") for t in tensors],
                outputs=[OpSchema.FormalParameter(f"output{i}", "T") for i in range(len(schema.returns))],
                type_constraints=[("T", float_types, "floating-point tensors")],
                attributes=[OpSchema.Attribute(a, getattr(OpSchema.AttrType, kind), a) for a, kind in attributes],
            )
        )
    node = getattr(values.Opset(namespace, CUSTOM_DOMAIN_VERSION), name)
    attribute_names = {a for a, _ in attributes}

    def translate(*args: Any) -> Any:
        inputs = [value for arg, value in zip(schema.arguments, args) if arg.name in tensors]
        attrs = {arg.name: int(v) if isinstance(v, bool) else v
                 for arg, v in zip(schema.arguments, args) if arg.name in attribute_names}
        for attr, value in attrs.items():
            if isinstance(value, float) and not math.isnan(value) and float(numpy.float32(value)) != value:
                raise ExportError(
                    f"{op}: argument {attr}={value!r} has no exact float32 value, and ONNX float attributes "
                    f"are 32-bit: the node would carry {float(numpy.float32(value))!r} and its output could "
                    "differ from eager's. Use a value that float32 holds exactly, or the portable mode."
                )
        return node(*inputs, **attrs)

    return _with_signature(translate, schema)


@dataclass
class OnnxPrepared:
    """An exported program and its translation table, ready to convert."""

    program: torch.export.ExportedProgram
    mode: str
    ops: list[str]
    routes: list[str]
    table: dict[torch._ops.OpOverload, Callable[..., Any]]


def prepare_onnx(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_dims: Sequence[DynamicDim] = (),
    mode: str = "portable",
) -> OnnxPrepared:
    """torch.export ``model`` with its torchbind objects routed (``routed_classes``),
    then pick each custom op's translation for ``mode``.

    Args:
        model: in eval mode, on the CPU, in its final dtype.
        example_inputs: to trace with.
        dynamic_dims: dims that stay symbolic in the ONNX graph.
        mode: ``portable`` or ``custom-domain``.

    Raises:
        OnnxUnavailableError: the extra is missing.
        ExportError: an op has no translation, a class no route, or a dtype or
            device ONNX cannot take; the message names it.
    """
    require_onnx()
    if mode not in ONNX_MODES:
        raise ExportError(f"unknown ONNX mode {mode!r}; expected one of {', '.join(ONNX_MODES)}")
    for i, x in enumerate(example_inputs):
        if x.device.type != "cpu":
            raise ExportError(
                f"input {i} is on {x.device}; the ONNX export runs on the CPU (the file itself is device-"
                "independent, and onnxruntime picks its execution provider when it loads it). Use --device cpu."
            )
        if x.is_floating_point() and x.dtype not in ONNX_DTYPES:
            raise ExportError(
                f"input {i} is {x.dtype}, which the ONNX target does not support: numpy, through which "
                "onnxruntime takes its inputs, has no bfloat16, and ONNX's Conv has no bfloat16 either. "
                "Export in float16 or float32."
            )
    with routed_classes(model) as routes, torch.no_grad():
        program = export_model(model, tuple(example_inputs), dynamic_dims)
    calls = graph_calls(program)
    if calls.classes:
        raise ExportError(f"the exported graph still calls torchbind classes {', '.join(calls.classes)}")
    table: dict[torch._ops.OpOverload, Callable[..., Any]] = {}
    missing = []
    for op in calls.ops:
        for overload in calls.overloads[op]:
            if mode == "custom-domain":
                table[overload] = _custom_domain(overload)
            elif (translation := portable_translation(op)) is not None:
                table[overload] = _portable(overload, translation)
            elif (written := _written_argument(overload)) is not None:
                raise ExportError(_in_place_error(op, written))
            else:
                missing.append(op)
    if missing:
        raise ExportError(
            f"no ONNX translation for the custom op(s) {', '.join(sorted(set(missing)))}. Register one next to "
            "the op's fake with aoti_deploy.compiler.onnx_translations.register_onnx_translation(op, fn), where "
            "fn(opset, *args) returns standard ONNX ops (e.g. lambda op, x: op.Identity(x)); or export in "
            "the custom-domain mode, which writes the op as a node for a runtime that implements it."
        )
    return OnnxPrepared(program, mode, calls.ops, routes, table)


def convert_onnx(prepared: OnnxPrepared, output: Path, spec_extras: dict[str, Any] | None = None) -> OnnxExport:
    """Convert a prepared program to ONNX, record the spec in the file's metadata,
    check it with ``onnx.checker`` (full check) and write it.

    Args:
        prepared: from ``prepare_onnx``.
        output: the .onnx file to write (parent folders are created).
        spec_extras: PackageSpec fields to record besides those of the graph
            (is_identity, example_shapes, op_libraries, ...).

    Raises:
        ExportError: the exporter or the checker failed; the message gives the cause.
    """
    import onnx

    # The exporter warns, on every export, that torchvision's ops cannot be registered.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    try:
        onnx_program = torch.onnx.export(
            prepared.program, dynamo=True, custom_translation_table=prepared.table, optimize=True, verbose=False
        )
    except Exception as error:  # the exporter raises its own types; keep the innermost cause
        cause = _innermost(error)
        if isinstance(cause, AotiDeployError):  # raised by a translation: already clear
            raise cause from error
        raise ExportError(f"torch.onnx.export failed: {_last_line(error)}") from error
    proto = onnx_program.model_proto
    custom = prepared.mode == "custom-domain"
    outputs = output_specs(prepared.program)
    spec = PackageSpec(
        inputs=input_specs(prepared.program),
        outputs=outputs,
        outputs_by_name=outputs_by_name(prepared.program, outputs),
        device="cpu",
        torch_version=torch.__version__,
        required_ops=[OpRef(op) for op in prepared.ops] if custom else [],
        shared_dims=shared_dims(prepared.program),
        optimizations="the ONNX exporter's optimizer only (folds constants, drops Identity nodes)",
        onnx_mode=prepared.mode,
        **(spec_extras or {}),
    )
    for key, value in spec.to_metadata().items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as error:  # onnx raises ValidationError or InferenceError
        raise ExportError(
            f"the ONNX graph fails onnx.checker (full check): {_last_line(error)}\nONNX ops take fewer dtypes "
            "than torch ops (e.g. Conv has no bfloat16); export in float32 or float16."
        ) from error
    output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, output)
    return OnnxExport(
        path=output,
        spec=spec,
        mode=prepared.mode,
        ops=prepared.ops,
        routes=prepared.routes,
        graph=str(prepared.program.graph),
        nodes=[(node.domain or "ai.onnx", node.op_type) for node in proto.graph.node],
    )


def export_onnx(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    output: Path,
    mode: str = "portable",
    dynamic_dims: Sequence[DynamicDim] = (),
    spec_extras: dict[str, Any] | None = None,
) -> OnnxExport:
    """``prepare_onnx`` then ``convert_onnx``."""
    return convert_onnx(prepare_onnx(model, example_inputs, dynamic_dims, mode), output, spec_extras)


def _innermost(error: BaseException) -> BaseException:
    """The exporter wraps the real error in several layers."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def _last_line(error: BaseException) -> str:
    """The innermost cause's type and first line."""
    error = _innermost(error)
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"

