"""The ONNX deploy target, run side: read the spec an ONNX file records, and run it
in onnxruntime with the inputs validated like a .pt2 package's.

A custom-domain file's nodes (``name`` in domain ``ns``) run the op library's own
kernels: each becomes an onnxruntime-extensions Python op that calls
``torch.ops.ns.name`` (its outputs come back through Python floats, which quiets
float32 signalling NaNs; see ``_register_py_op``). Those Python ops live in the
extensions' one domain (``ai.onnx.contrib``), so the session loads a copy of the
model whose custom nodes are moved there; the file on disk is not changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import PackageError
from .onnx_extra import require_onnx
from ..package.archive import check_model_file
from ..package.spec import PackageSpec
from .preflight import check_required_symbols, this_host
from .validation import validate_inputs

_HINT = "Create it with `export_compile onnx` (default output artifacts/model.onnx)."
# onnx TensorProto element types -> (torch dtype, onnxruntime-extensions type name).
# Its Python ops take no float16: "Type float16 not supported by python customops api",
# thrown where nothing catches it, which aborts the process; so float16 is refused first.
_ELEM_TYPES = {1: (torch.float32, "dt_float"), 11: (torch.float64, "dt_double")}
_ELEM_NAMES = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}
# Python ops registered with onnxruntime-extensions in this process, by op type.
_registered_py_ops: set[str] = set()
# Errors the Python kernels caught during the current run. An exception that left a
# Python op would abort the process inside onnxruntime-extensions, so the kernels
# record it, return a placeholder, and OnnxSession.run raises it after the run.
_kernel_errors: list[str] = []


def _load_proto(path: Path) -> Any:
    require_onnx()
    import onnx

    check_model_file(path, "ONNX file", _HINT)
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # protobuf's DecodeError and friends
        raise PackageError(
            f"could not read the ONNX file {path}: {type(error).__name__}: {str(error).strip()[:200]}\n"
            f"The file is damaged or is not an ONNX model. {_HINT}"
        ) from error
    if not proto.graph.node:
        raise PackageError(f"{path} holds no ONNX graph: the file is damaged or is not an ONNX model. {_HINT}")
    return proto


def read_onnx_spec(path: str | Path) -> PackageSpec:
    """The spec export_compile recorded in the file's metadata.

    Raises:
        PackageError: missing, empty, unreadable, or not written by export_compile.
        OnnxUnavailableError: the ONNX extra is not installed.
    """
    path = Path(path)
    proto = _load_proto(path)
    return PackageSpec.from_metadata({entry.key: entry.value for entry in proto.metadata_props}, path)


class OnnxSession:
    """An ONNX file loaded into an onnxruntime CPU session."""

    def __init__(self, path: str | Path, spec: PackageSpec) -> None:
        import onnxruntime

        self.path = Path(path)
        self.spec = spec
        proto = _load_proto(self.path)
        options = onnxruntime.SessionOptions()
        if spec.onnx_mode == "custom-domain":
            proto = _with_python_kernels(proto, spec)
            from onnxruntime_extensions import get_library_path

            options.register_custom_ops_library(get_library_path())
        try:
            self._session = onnxruntime.InferenceSession(
                proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # onnxruntime's Fail, NotImplemented, InvalidGraph
            message = str(error).strip().splitlines()[0]
            hint = ""
            if "NOT_IMPLEMENTED" in message:
                hint = (
                    "\nonnxruntime's CPU execution provider has no kernel for an op at this dtype (e.g. Conv in "
                    "float64). Export in float32 (or float16), or run the file on a runtime that has one."
                )
            raise PackageError(f"onnxruntime could not load {self.path}: {message}{hint}") from error
        self._input_names = [i.name for i in self._session.get_inputs()]

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Validate against the recorded spec, then run. Returns CPU tensors."""
        ready = validate_inputs(inputs, self.spec)
        feed = {name: x.detach().numpy() for name, x in zip(self._input_names, ready)}
        _kernel_errors.clear()
        try:
            outputs = self._session.run(None, feed)
        except Exception as error:  # onnxruntime raises its own types
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PackageError(f"running {self.path} in onnxruntime failed: {_kernel_errors_text() or first_line}") from error
        if _kernel_errors:
            raise PackageError(f"running {self.path} in onnxruntime failed: {_kernel_errors_text()}")
        return [torch.from_numpy(output) for output in outputs]


def _kernel_errors_text() -> str:
    errors = "; ".join(_kernel_errors)
    _kernel_errors.clear()
    return errors


def load_onnx(path: str | Path, spec: PackageSpec) -> OnnxSession:
    """Load an ONNX file; for a custom-domain file its ops must be registered in this
    process first (``load_package_libraries``)."""
    # A custom-domain file's nodes run the recorded ops' kernels.
    check_required_symbols(spec, this_host())
    return OnnxSession(path, spec)


def _with_python_kernels(proto: Any, spec: PackageSpec) -> Any:
    """A copy of ``proto`` whose custom-domain nodes are onnxruntime-extensions Python
    ops that call the op library's kernels, one op type per (op, dtype)."""
    import onnx
    from onnxruntime_extensions import PyCustomOpDef, default_opset_domain

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    domains = {op.name.split("::")[0] for op in spec.required_ops}
    elem_types = _value_types(copy)
    for node in copy.graph.node:
        if node.domain not in domains:
            continue
        op = f"{node.domain}::{node.op_type}"
        elem_type = elem_types.get(node.input[0]) if node.input else None
        if elem_type not in _ELEM_TYPES:
            raise PackageError(
                f"the {spec.onnx_mode} node {op} takes {_ELEM_NAMES.get(elem_type, f'ONNX element type {elem_type}')}, "
                "but onnxruntime-extensions' Python ops, which run such nodes here, take float32 and float64 "
                "only. Export the custom-domain file in float32, or use the portable mode (float16 works there)."
            )
        dtype, type_name = _ELEM_TYPES[elem_type]
        op_type = f"{node.domain}__{node.op_type}__{str(dtype).removeprefix('torch.')}"
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        _register_py_op(op_type, op, len(node.input), len(node.output), getattr(PyCustomOpDef, type_name),
                        {name: _attribute_type(value) for name, value in attributes.items()})
        node.domain, node.op_type = default_opset_domain(), op_type
    for opset in copy.opset_import:
        if opset.domain in domains:
            opset.domain = default_opset_domain()
    # Opset imports must be unique per domain.
    seen: dict[str, int] = {}
    for opset in list(copy.opset_import):
        if opset.domain in seen:
            copy.opset_import.remove(opset)
        seen[opset.domain] = opset.version
    return copy


def _value_types(proto: Any) -> dict[str, int]:
    """ONNX element type of every named value the graph declares."""
    types = {v.name: v.type.tensor_type.elem_type for v in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]}
    types.update({init.name: init.data_type for init in proto.graph.initializer})
    return types


def _attribute_type(value: Any) -> int:
    from onnxruntime_extensions import PyCustomOpDef

    if isinstance(value, bytes):
        return PyCustomOpDef.dt_string
    return PyCustomOpDef.dt_int64 if isinstance(value, int) else PyCustomOpDef.dt_float


def _register_py_op(op_type: str, op: str, inputs: int, outputs: int, elem: int, attrs: dict[str, int]) -> None:
    """Register, once per process, the Python op ``op_type``: it calls ``op``'s kernel
    on the input arrays and the node's attributes.

    onnxruntime-extensions hands a Python op's outputs back to onnxruntime as a list of
    Python floats, so each float32 output value goes through a double: every bit
    pattern survives that except a signalling NaN, which comes back quiet (same sign
    and payload, quiet bit set). float64 values keep every bit. tests/test_onnx.py
    pins both."""
    if op_type in _registered_py_ops:
        return
    from onnxruntime_extensions import onnx_op

    namespace, name = op.split("::")
    target = getattr(getattr(torch.ops, namespace), name)
    schema = target.default._schema
    tensor_names = [arg.name for arg in schema.arguments if str(arg.type) == "Tensor"]

    def kernel(*arrays: Any, **attributes: Any) -> Any:
        try:
            kwargs: dict[str, Any] = {name: torch.from_numpy(array) for name, array in zip(tensor_names, arrays)}
            kwargs.update({k: v.decode() if isinstance(v, bytes) else v for k, v in attributes.items()})
            result = target(**kwargs)
            if isinstance(result, (tuple, list)):
                return tuple(t.numpy() for t in result)
            return result.numpy()
        except Exception as error:  # must not leave the Python op (see _kernel_errors)
            text = str(error).strip()
            _kernel_errors.append(f"the op library's kernel of {op} failed: {text.splitlines()[0] if text else error!r}")
            placeholder = arrays[0].copy()
            return placeholder if outputs == 1 else tuple(placeholder for _ in range(outputs))

    onnx_op(op_type=op_type, inputs=[elem] * inputs, outputs=[elem] * outputs, attrs=attrs)(kernel)
    _registered_py_ops.add(op_type)
