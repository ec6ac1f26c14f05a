"""The Triton config a package's spec gives, before anything is written: the names
its requests use (the spec's recorded names, else INPUT__i/OUTPUT__i), Triton's data
types, whether and on which dim Triton may batch it, the instances, parameters and
version policy the `aoti` backend reads; the config's text, and a written config parsed
back with Triton's own grammar."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import AotiDeployError, PackageError
from ..locate import TRITON_BACKEND_NAME
from ..package.dtypes import TRITON_TYPES
from ..package.spec import DimSpec, PackageSpec, TensorSpec
from .triton_install import require_triton_client

if TYPE_CHECKING:
    from .served_models import ServedModel

# Tensor names of a package that records none, in its flat input and output order;
# the C++ backend (cpp_runtime/triton) uses the same prefixes, and the same rule
# (served_name).
INPUT_PREFIX = "INPUT__"
OUTPUT_PREFIX = "OUTPUT__"
# The config parameters the backend reads.
PARAM_INTRA_OP_THREADS = "intra_op_threads"
PARAM_TRUSTED_KEY = "trusted_key"  # a PEM public key: the backend verifies the bundle with it
# max_batch_size is an int32 in Triton's ModelConfig.
MAX_BATCH_SIZE_LIMIT = 2**31 - 1

# Spec dtype -> Triton's data type: the dtype table's (package/dtypes.py), named here
# for the serving code; a config writes TYPE_<datatype>.
DATATYPES: dict[str, str] = TRITON_TYPES

_MODEL_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class TritonTensor(NamedTuple):
    """One input or output as the config declares it."""

    name: str  # the spec's name (e.g. input_ids), else INPUT__i / OUTPUT__i
    data_type: str  # e.g. TYPE_FP32
    dims: tuple[int, ...]  # -1 for a dynamic size; without dim 0 when the model is batched
    # Triton's reshape: the model's own shape (without dim 0) when requests carry another.
    # Only for a tensor that is its batch dim alone in a batched model: dims (1,), reshape
    # (), so requests carry [batch, 1] and the model takes or returns [batch]. (A Python
    # scalar output is dims (1,) with no reshape: Triton refuses an empty reshape in a
    # model without batching, so the backend itself answers [1] for the 0-d tensor.)
    reshape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TritonConfig:
    """What ``config.pbtxt`` says, before it is written (``text``)."""

    name: str
    kind: str  # KIND_CPU or KIND_GPU
    instances: int
    max_batch_size: int  # 0: not batched, dims are the full shapes
    dynamic_batching: bool  # a dynamic_batching block is written
    max_queue_delay_us: int
    inputs: tuple[TritonTensor, ...]
    outputs: tuple[TritonTensor, ...]
    batching: str  # why the model is or is not batched, for the summary
    parameters: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    version_policy: "VersionPolicy | None" = None  # None: Triton's default, the latest version

    @property
    def batchable(self) -> bool:
        return self.max_batch_size > 0

    def text(self) -> str:
        """The config in protobuf text format (Triton's ModelConfig)."""
        lines = [f"name: {_quote(self.name)}", f"backend: {_quote(TRITON_BACKEND_NAME)}",
                 f"max_batch_size: {self.max_batch_size}"]
        for field_name, tensors in (("input", self.inputs), ("output", self.outputs)):
            lines.append(f"{field_name} [")
            for k, tensor in enumerate(tensors):
                lines += [
                    "  {",
                    f"    name: {_quote(tensor.name)}",
                    f"    data_type: {tensor.data_type}",
                    f"    dims: {_list_text(tensor.dims)}",
                    *([] if tensor.reshape is None else [f"    reshape: {{ shape: {_list_text(tensor.reshape)} }}"]),
                    "  }," if k < len(tensors) - 1 else "  }",
                ]
            lines.append("]")
        if self.dynamic_batching:
            lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {self.max_queue_delay_us}", "}"]
        lines += ["instance_group [", "  {", f"    kind: {self.kind}", f"    count: {self.instances}", "  }", "]"]
        for key, value in self.parameters:
            lines += ["parameters: {", f"  key: {_quote(key)}", f"  value: {{ string_value: {_quote(value)} }}", "}"]
        if self.version_policy is not None:
            lines.append(self.version_policy.text())
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VersionPolicy:
    """Which versions of a model Triton serves (ModelConfig.version_policy): the
    newest ``latest`` ones, ``all``, or the ``specific`` ones listed."""

    kind: str  # "latest", "all" or "specific"
    latest: int = 1
    versions: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "VersionPolicy":
        """``latest:N``, ``all`` or ``specific:V1,V2`` (as --version-policy takes it).

        Raises:
            AotiDeployError (kind usage): anything else.
        """
        kind, _, rest = text.strip().partition(":")
        try:
            if kind == "all" and not rest:
                return cls("all")
            if kind == "latest":
                count = int(rest) if rest else 1
                if count >= 1:
                    return cls("latest", latest=count)
            if kind == "specific":
                versions = tuple(sorted({int(v) for v in rest.split(",") if v.strip()}))
                if versions and min(versions) >= 1:
                    return cls("specific", versions=versions)
        except ValueError:
            pass
        raise usage_error(f"invalid version policy {text!r}: expected latest:N (the N newest versions, N >= 1), "
                          "all, or specific:V1,V2 (those versions, each >= 1)")

    @classmethod
    def of_config(cls, config: Any) -> "VersionPolicy":
        """The policy of a parsed config (tritonclient's ModelConfig); Triton's default
        (the latest version) when it sets none."""
        which = config.version_policy.WhichOneof("policy_choice") if config.HasField("version_policy") else None
        if which == "all":
            return cls("all")
        if which == "specific":
            return cls("specific", versions=tuple(sorted(int(v) for v in config.version_policy.specific.versions)))
        if which == "latest":
            return cls("latest", latest=max(1, int(config.version_policy.latest.num_versions)))
        return cls("latest")

    def served(self, available: Sequence[int]) -> tuple[int, ...]:
        """The versions Triton serves out of ``available``, oldest first."""
        present = sorted(set(available))
        if self.kind == "all":
            return tuple(present)
        if self.kind == "specific":
            return tuple(v for v in present if v in self.versions)
        return tuple(present[-self.latest:])

    def text(self) -> str:
        if self.kind == "all":
            return "version_policy: { all: {} }"
        if self.kind == "specific":
            return f"version_policy: {{ specific: {{ versions: [ {', '.join(map(str, self.versions))} ] }} }}"
        return f"version_policy: {{ latest: {{ num_versions: {self.latest} }} }}"

    def __str__(self) -> str:
        if self.kind == "specific":
            return "specific:" + ",".join(map(str, self.versions))
        return "all" if self.kind == "all" else f"latest:{self.latest}"


def _list_text(values: Sequence[int]) -> str:
    """A repeated int64 field: ``[ 3, 8 ]``, ``[ ]`` when empty."""
    return f"[ {', '.join(map(str, values))} ]" if values else "[ ]"


def _quote(text: str) -> str:
    """A protobuf text-format string literal: quotes and backslashes escaped, and every
    byte outside printable ASCII as an octal escape (the form every parser reads)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def usage_error(message: str) -> AotiDeployError:
    """A bad name, number or option of a model, its config or its repository."""
    return AotiDeployError(message, kind="usage")


def check_model_name(name: str) -> str:
    """A Triton model name is its folder's name: letters, digits, '_', '.', '-', not
    starting with '.'.

    Raises:
        AotiDeployError (kind usage): any other name.
    """
    if not _MODEL_NAME.fullmatch(name) or name.startswith("."):
        raise usage_error(
            f"invalid model name {name!r}: a model name is its folder's name in the repository, made of letters, "
            "digits, '_', '.' and '-', not starting with '.'; pass --name NAME"
        )
    return name


def served_name(specs: Sequence[TensorSpec], index: int, prefix: str) -> str:
    """The name tensor ``index`` goes by in the config and in requests: the spec's
    recorded name, else ``prefix`` + index (INPUT_PREFIX or OUTPUT_PREFIX)."""
    return specs[index].name if index < len(specs) and specs[index].name else f"{prefix}{index}"


class TensorNames(NamedTuple):
    """The names a model's requests use for its inputs and outputs, in the package's
    order: the names its config declares (the spec's recorded names, else INPUT__i and
    OUTPUT__i); and which of them requests shape otherwise than the package does."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # The positions of the tensors that requests and responses carry as [batch, 1] for
    # the model's [batch] (Triton's reshape, ``served_dims``).
    reshaped_inputs: tuple[int, ...] = ()
    reshaped_outputs: tuple[int, ...] = ()
    # The positions of the Python scalar outputs (int, float, bool), which responses
    # carry as a one-element tensor [1] for the model's 0-d one. Known from the spec
    # only: a config declares them as any [1] output.
    scalar_outputs: tuple[int, ...] = ()

    @classmethod
    def of_spec(cls, spec: PackageSpec) -> "TensorNames":
        """A package's names, in its order. The backend loads a model only when its
        config declares exactly these (cpp_runtime/triton/model_config.cpp)."""
        batched = batch_dim(spec)[0] is not None
        return cls(
            tuple(served_name(spec.inputs, i, INPUT_PREFIX) for i in range(len(spec.inputs))),
            tuple(served_name(spec.outputs, k, OUTPUT_PREFIX) for k in range(len(spec.outputs))),
            tuple(i for i, t in enumerate(spec.inputs) if batched and served_dims(t, batched)[1] is not None),
            tuple(k for k, t in enumerate(spec.outputs) if batched and served_dims(t, batched)[1] is not None),
            tuple(k for k, t in enumerate(spec.outputs) if t.is_scalar),
        )

    @classmethod
    def of(cls, model: ServedModel) -> "TensorNames":
        """A repository model's names, in its package's order."""
        return cls.of_spec(model.spec)

    @classmethod
    def of_config(cls, config: dict[str, Any]) -> "TensorNames":
        """The names a config declares, in its order, from the server's JSON of it."""
        inputs, outputs = config.get("input", []), config.get("output", [])
        return cls(
            tuple(str(item.get("name", "")) for item in inputs),
            tuple(str(item.get("name", "")) for item in outputs),
            tuple(i for i, item in enumerate(inputs) if _reshaped_to_batch(config, item)),
            tuple(k for k, item in enumerate(outputs) if _reshaped_to_batch(config, item)),
        )


def _reshaped_to_batch(config: dict[str, Any], item: dict[str, Any]) -> bool:
    """The config item is [1] reshaped to [] in a batched model (protobuf's JSON may
    leave out the empty shape, and writes int64 dims as strings)."""
    reshape = item.get("reshape")
    return (int(config.get("max_batch_size", 0) or 0) > 0 and isinstance(reshape, dict)
            and not reshape.get("shape") and [int(d) for d in item.get("dims", [])] == [1])


def _data_type(spec: TensorSpec, label: str) -> str:
    if spec.dtype not in DATATYPES:
        raise PackageError(
            f"{label} has dtype {spec.dtype}, which Triton has no data type for, so the aoti backend cannot serve "
            f"it; export the model with tensors of a dtype Triton serves: {', '.join(DATATYPES)}",
            kind="triton_dtype",
        )
    return "TYPE_" + DATATYPES[spec.dtype]


def _config_dims(dims: Sequence[DimSpec]) -> tuple[int, ...]:
    return tuple(d.min if d.is_static else -1 for d in dims)


def served_dims(tensor: TensorSpec, batched: bool) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """A tensor's config ``dims`` and ``reshape`` (None: none written). In a batched
    model the batch dim is left out of both; a tensor that is only its batch dim is
    declared [1] and reshaped to [] (Triton's convention: requests carry [batch, 1], the
    model sees [batch]; the backend accepts exactly this, model_config.cpp). A Python
    scalar output (an int, float or bool, 0-d in the package; never batched) is
    declared [1], with no reshape (Triton refuses an empty one without batching): the
    backend answers with a one-element tensor."""
    if tensor.is_scalar:
        return (1,), None
    if not batched:
        return _config_dims(tensor.dims), None
    if len(tensor.dims) == 1:
        return (1,), ()
    return _config_dims(tensor.dims[1:]), None


def batch_dim(spec: PackageSpec) -> tuple[DimSpec | None, str]:
    """The shared batch dim, if the package is batchable, and why it is or is not.

    Batchable: every input's dim 0 is dynamic, all of them are one size (one input, or
    every (input, 0) in one group of ``spec.shared_dims``, with no other dim), and every
    output's dim 0 has the same range. A tensor may be its batch dim alone (one score
    per example): it is served through Triton's reshape (``served_dims``). The backend
    applies the same rule to a config (cpp_runtime/triton/model_config.cpp)."""
    outputs = spec.outputs
    if not spec.inputs:
        return None, "not batched: the package takes no inputs"
    for i, tensor in enumerate(spec.inputs):
        if not tensor.dims:
            return None, f"not batched: input {i} is a scalar"
        if tensor.dims[0].is_static:
            return None, f"not batched: input {i}'s dim 0 is static ({tensor.dims[0]})"
    if len(spec.inputs) > 1:
        wanted = {(i, 0) for i in range(len(spec.inputs))}
        if not any(wanted <= {tuple(position) for position in group} for group in spec.shared_dims):
            return None, "not batched: the inputs' dims 0 are not recorded as one size (shared dims)"
    # Merging requests along dim 0 must change no other dim the compiled code ties to it.
    for group in spec.shared_dims:
        positions = [tuple(position) for position in group]
        if (0, 0) in positions:
            for i, d in positions:
                if d != 0:
                    return None, f"not batched: input {i}'s dim {d} is one size with the batch dim"
    dim = spec.inputs[0].dims[0]
    for i, tensor in enumerate(spec.inputs):
        if tensor.dims[0] != dim:
            return None, f"not batched: input {i}'s dim 0 ({tensor.dims[0]}) differs from input 0's ({dim})"
    for k, tensor in enumerate(outputs):
        if tensor.is_scalar:
            return None, (f"not batched: output {k} is a Python {tensor.kind}, one value for the whole call, which "
                          "requests merged into one batch could not each get")
        if not tensor.dims or tensor.dims[0] != dim:
            got = tensor.dims[0] if tensor.dims else "none, a scalar"
            return None, f"not batched: output {k}'s dim 0 ({got}) is not the inputs' batch dim ({dim})"
    return dim, f"batched on dim 0 ({dim})"


def triton_config(
    spec: PackageSpec,
    name: str,
    *,
    instances: int = 1,
    dynamic_batching: bool = True,
    max_queue_delay_us: int = 100,
    intra_op_threads: int | None = None,
    trusted_key: str | os.PathLike[str] | None = None,
    version_policy: VersionPolicy | None = None,
) -> TritonConfig:
    """The Triton config of a package, from its spec alone (no files are read).

    Args:
        spec: the package's spec (``read_package_spec``).
        name: the model name (its folder in the repository).
        instances: model instances (``instance_group`` count).
        dynamic_batching: write a ``dynamic_batching`` block when the package is batchable.
        max_queue_delay_us: how long the dynamic batcher waits to fill a batch.
        intra_op_threads: the backend's intra-op threads per instance; None: its default.
        trusted_key: a PEM public key path the backend verifies the bundle with.
        version_policy: which versions Triton serves; None writes none (Triton's
            default: the latest).

    Raises:
        PackageError: Python-only ops, no recorded outputs, or a dtype Triton's
            backend does not serve.
        AotiDeployError (kind usage): a bad name or number.
    """
    check_model_name(name)
    if instances < 1:
        raise usage_error(f"instances must be at least 1, got {instances}")
    if max_queue_delay_us < 0:
        raise usage_error(f"max queue delay must be 0 or more microseconds, got {max_queue_delay_us}")
    if intra_op_threads is not None and intra_op_threads < 1:
        raise usage_error(f"intra-op threads must be at least 1, got {intra_op_threads}")
    if spec.python_only_ops:
        raise PackageError(
            f"the package calls Python-only custom ops ({', '.join(spec.python_only_ops)}); the Triton aoti backend "
            "runs no Python, so it cannot serve it. Register them in C++ (TORCH_LIBRARY) and re-export.",
            kind="python_only_ops",
        )
    outputs = spec.outputs
    if not outputs:
        raise PackageError(
            "the package records no outputs: it was exported before export_compile recorded them (or its model "
            "returns something other than tensors), and a Triton config needs each output's dtype and dims. "
            "Re-export it with export_compile.",
            kind="no_outputs",
        )
    names = TensorNames.of_spec(spec)
    input_names, output_names = names.inputs, names.outputs
    input_types = [_data_type(t, f"input {i} ({input_names[i]})") for i, t in enumerate(spec.inputs)]
    output_types = [_data_type(t, f"output {k} ({output_names[k]})") for k, t in enumerate(outputs)]

    dim, batching = batch_dim(spec)
    if dim is None:
        for label, names, tensors in (("input", input_names, spec.inputs), ("output", output_names, outputs)):
            for i, tensor in enumerate(tensors):
                if not tensor.dims and not tensor.is_scalar:
                    raise PackageError(
                        f"{label} {i} ({names[i]}) is a scalar (0-d); Triton serves no scalar tensors in a model "
                        "without batching. Export the model with a 1-element dim instead.",
                        kind="triton_scalar",
                    )
    warnings: list[str] = []
    max_batch_size = 0
    if dim is not None:
        # An unbounded batch dim, or one past Triton's int32, is capped at its limit.
        max_batch_size = MAX_BATCH_SIZE_LIMIT if dim.max is None else min(dim.max, MAX_BATCH_SIZE_LIMIT)
        alone = [f"{label} {i} ({names[i]})"
                 for label, names, tensors in (("input", input_names, spec.inputs), ("output", output_names, outputs))
                 for i, tensor in enumerate(tensors) if len(tensor.dims) == 1]
        if alone:
            batching += (f"; {', '.join(alone)} {'is' if len(alone) == 1 else 'are'} one value per example, "
                         "[batch, 1] in requests and responses (Triton's reshape)")
        if dim.min > 1:
            positions = ",".join(f"{i}.0" for i in range(len(spec.inputs)))
            warnings.append(
                f"the batch dim takes {dim} items, so a request (or a batch Triton forms) of fewer than {dim.min} "
                f"fails; to serve single items, export with a batch range from 1 (export_compile --dynamic-dim "
                f"{positions}=1:{'' if dim.max is None else dim.max})"
            )
    parameters = []
    if intra_op_threads is not None:
        parameters.append((PARAM_INTRA_OP_THREADS, str(intra_op_threads)))
    if trusted_key is not None:
        parameters.append((PARAM_TRUSTED_KEY, str(trusted_key)))
    return TritonConfig(
        name=name,
        kind="KIND_GPU" if spec.device.startswith("cuda") else "KIND_CPU",
        instances=instances,
        max_batch_size=max_batch_size,
        dynamic_batching=dynamic_batching and max_batch_size > 0,
        max_queue_delay_us=max_queue_delay_us,
        inputs=tuple(
            TritonTensor(name, data_type, *served_dims(t, dim is not None))
            for name, t, data_type in zip(input_names, spec.inputs, input_types)
        ),
        outputs=tuple(
            TritonTensor(name, data_type, *served_dims(t, dim is not None))
            for name, t, data_type in zip(output_names, outputs, output_types)
        ),
        batching=batching if dim is None or dynamic_batching else f"{batching}, dynamic batching off",
        parameters=tuple(parameters),
        warnings=tuple(warnings),
        version_policy=version_policy,
    )


def config_text(spec: PackageSpec, name: str, **options: Any) -> str:
    """``config.pbtxt`` for a package's spec: ``triton_config(spec, name, **options).text()``,
    with ``triton_config``'s options and errors."""
    return triton_config(spec, name, **options).text()


def parse_config(path: str | os.PathLike[str]) -> Any:
    """Parse a config.pbtxt with Triton's own grammar (tritonclient's ModelConfig).

    Raises:
        TritonUnavailableError: tritonclient is not installed.
        PackageError: the file cannot be read or parsed.
    """
    require_triton_client()
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    try:
        text = Path(path).read_text(encoding="utf-8")
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except OSError as error:
        raise PackageError(f"could not read {path}: {error.strerror or error}", kind="not_found") from error
    except text_format.ParseError as error:
        raise PackageError(f"{path} is not a valid Triton model config: {error}", kind="malformed") from error
