"""A Triton model repository from a package: ``<repository>/<name>/config.pbtxt`` for
the `aoti` backend, and ``<repository>/<name>/<version>/``, a deploy bundle
(package/bundle.py) that the backend loads with the runners' trust policy. The
config's names (the spec's recorded names, else INPUT__i/OUTPUT__i), types and
batching come from the package's spec alone. Also reads a repository back, for
aoti-deploy serve."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import AotiDeployError, PackageError
from ..locate import TRITON_BACKEND_NAME
from ..package.dtypes import TRITON_TYPES
from ..package.spec import DimSpec, PackageSpec, TensorSpec

CONFIG_NAME = "config.pbtxt"
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
                    f"    dims: [ {', '.join(str(d) for d in tensor.dims)} ]",
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
        raise _usage(f"invalid version policy {text!r}: expected latest:N (the N newest versions, N >= 1), all, or "
                     "specific:V1,V2 (those versions, each >= 1)")

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


def _usage(message: str) -> AotiDeployError:
    return AotiDeployError(message, kind="usage")


def check_model_name(name: str) -> str:
    """A Triton model name is its folder's name: letters, digits, '_', '.', '-', not
    starting with '.'.

    Raises:
        AotiDeployError (kind usage): any other name.
    """
    if not _MODEL_NAME.fullmatch(name) or name.startswith("."):
        raise _usage(
            f"invalid model name {name!r}: a model name is its folder's name in the repository, made of letters, "
            "digits, '_', '.' and '-', not starting with '.'; pass --name NAME"
        )
    return name


def default_model_name(package: str | os.PathLike[str]) -> str:
    """The package file's stem (``model.pt2`` -> ``model``), or a bundle folder's name."""
    path = Path(package)
    return path.name if path.is_dir() else path.stem


def served_name(specs: Sequence[TensorSpec], index: int, prefix: str) -> str:
    """The name tensor ``index`` goes by in the config and in requests: the spec's
    recorded name, else ``prefix`` + index (INPUT_PREFIX or OUTPUT_PREFIX)."""
    return specs[index].name if index < len(specs) and specs[index].name else f"{prefix}{index}"


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


def batch_dim(spec: PackageSpec) -> tuple[DimSpec | None, str]:
    """The shared batch dim, if the package is batchable, and why it is or is not.

    Batchable: every input's dim 0 is dynamic, all of them are one size (one input, or
    every (input, 0) in one group of ``spec.shared_dims``, with no other dim), and every
    output's dim 0 has the same range. The backend applies the same rule to a config
    (cpp_runtime/triton/model_config.cpp)."""
    outputs = spec.outputs
    if not spec.inputs:
        return None, "not batched: the package takes no inputs"
    for i, tensor in enumerate(spec.inputs):
        if not tensor.dims:
            return None, f"not batched: input {i} is a scalar"
        if tensor.dims[0].is_static:
            return None, f"not batched: input {i}'s dim 0 is static ({tensor.dims[0]})"
    # A tensor that is only its batch dim would need Triton's reshape (clients would send
    # [batch, 1]); served unbatched, every tensor keeps the package's own shape.
    for label, tensors in (("input", spec.inputs), ("output", outputs)):
        for i, tensor in enumerate(tensors):
            if len(tensor.dims) == 1:
                return None, (f"not batched: {label} {i} has no dim besides dim 0 (one value per example); "
                              "Triton batches tensors with a dim after the batch: return it as [B, 1] (e.g. "
                              "scores.unsqueeze(-1)) and export again to serve it batched")
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
        raise _usage(f"instances must be at least 1, got {instances}")
    if max_queue_delay_us < 0:
        raise _usage(f"max queue delay must be 0 or more microseconds, got {max_queue_delay_us}")
    if intra_op_threads is not None and intra_op_threads < 1:
        raise _usage(f"intra-op threads must be at least 1, got {intra_op_threads}")
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
    input_names = [served_name(spec.inputs, i, INPUT_PREFIX) for i in range(len(spec.inputs))]
    output_names = [served_name(outputs, k, OUTPUT_PREFIX) for k in range(len(outputs))]
    input_types = [_data_type(t, f"input {i} ({input_names[i]})") for i, t in enumerate(spec.inputs)]
    output_types = [_data_type(t, f"output {k} ({output_names[k]})") for k, t in enumerate(outputs)]

    dim, batching = batch_dim(spec)
    if dim is None:
        for label, names, tensors in (("input", input_names, spec.inputs), ("output", output_names, outputs)):
            for i, tensor in enumerate(tensors):
                if not tensor.dims:
                    raise PackageError(
                        f"{label} {i} ({names[i]}) is a scalar (0-d); Triton serves no scalar tensors in a model "
                        "without batching. Export the model with a 1-element dim instead.",
                        kind="triton_scalar",
                    )
    warnings: list[str] = []
    skip = 0
    max_batch_size = 0
    if dim is not None:
        skip = 1
        # An unbounded batch dim, or one past Triton's int32, is capped at its limit.
        max_batch_size = MAX_BATCH_SIZE_LIMIT if dim.max is None else min(dim.max, MAX_BATCH_SIZE_LIMIT)
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
            TritonTensor(name, data_type, _config_dims(t.dims[skip:]))
            for name, t, data_type in zip(input_names, spec.inputs, input_types)
        ),
        outputs=tuple(
            TritonTensor(name, data_type, _config_dims(t.dims[skip:]))
            for name, t, data_type in zip(output_names, outputs, output_types)
        ),
        batching=batching if dim is None or dynamic_batching else f"{batching}, dynamic batching off",
        parameters=tuple(parameters),
        warnings=tuple(warnings),
        version_policy=version_policy,
    )


def config_text(
    spec: PackageSpec,
    name: str,
    *,
    instances: int = 1,
    dynamic_batching: bool = True,
    max_queue_delay_us: int = 100,
    intra_op_threads: int | None = None,
    trusted_key: str | os.PathLike[str] | None = None,
    version_policy: VersionPolicy | None = None,
) -> str:
    """``config.pbtxt`` for a package's spec: ``triton_config(...).text()``."""
    return triton_config(
        spec,
        name,
        instances=instances,
        dynamic_batching=dynamic_batching,
        max_queue_delay_us=max_queue_delay_us,
        intra_op_threads=intra_op_threads,
        trusted_key=trusted_key,
        version_policy=version_policy,
    ).text()


@dataclass(frozen=True)
class RepositoryModel:
    """What ``write_repository`` wrote."""

    repository: Path
    name: str
    version: int
    config_path: Path  # <repository>/<name>/config.pbtxt
    bundle: Path  # <repository>/<name>/<version>/
    config: TritonConfig
    signed: bool
    files: list[str] = field(default_factory=list)  # the bundle's files
    warnings: list[str] = field(default_factory=list)
    versions: tuple[int, ...] = ()  # every version in the model's folder afterwards
    removed: tuple[int, ...] = ()  # versions removed to keep the newest ``keep_versions``

    @property
    def batchable(self) -> bool:
        return self.config.batchable

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @property
    def inputs(self) -> tuple[TritonTensor, ...]:
        return self.config.inputs

    @property
    def outputs(self) -> tuple[TritonTensor, ...]:
        return self.config.outputs


def _package_spec(package: Path) -> PackageSpec:
    """The spec of a .pt2 package or of a bundle's."""
    from ..package.archive import read_package_spec
    from ..package.bundle import is_bundle, read_layout
    from ..runtime import is_onnx_path

    if is_bundle(package):
        return read_package_spec(read_layout(package).package)
    if is_onnx_path(package):
        raise PackageError(
            f"{package} is an ONNX file; the Triton aoti backend serves AOTI packages (.pt2) and bundles",
            kind="not_found",
        )
    return read_package_spec(package)


def write_repository(
    package: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    *,
    name: str,
    version: int | None = None,
    keep_versions: int | None = None,
    version_policy: VersionPolicy | str | None = None,
    instances: int = 1,
    dynamic_batching: bool = True,
    max_queue_delay_us: int = 100,
    op_libraries: Sequence[str | os.PathLike[str]] = (),
    sign_key: str | os.PathLike[str] | None = None,
    intra_op_threads: int | None = None,
    trusted_key: str | os.PathLike[str] | None = None,
) -> RepositoryModel:
    """Publish a package as a version of a model in a Triton model repository: the
    bundle ``<repository>/<name>/<version>/`` and then
    ``<repository>/<name>/config.pbtxt``. Nothing is written if the package cannot be
    served.

    Publishing is atomic for a server that polls the repository: the bundle is
    written (and, with ``trusted_key``, verified as the backend will verify it) in a
    hidden staging folder beside the versions, which Triton ignores, and renamed into
    place only when whole; a version that already exists is swapped with the new one
    in one step (renameat2 RENAME_EXCHANGE) where the file system can. The config is
    replaced through a temporary file and a rename. Versions beyond the newest
    ``keep_versions`` are then removed, each renamed out of sight before deletion.

    Args:
        package: a .pt2 package or a bundle folder.
        repository: the model repository folder (made if missing).
        name: the model name.
        version: the version folder (1 or more); None: the next free number (one
            more than the newest version there, 1 in a new model).
        keep_versions: keep only this many newest versions (the new one included,
            and never removed); None keeps all.
        version_policy: the config's version_policy (a VersionPolicy, or text as
            ``VersionPolicy.parse`` takes it: ``latest:N``, ``all``,
            ``specific:V1,V2``); None writes none (Triton serves the latest).
        op_libraries, sign_key: as for ``write_bundle``.
        trusted_key: a PEM public key the backend verifies the bundle with (an
            unsigned bundle is then refused: a warning says so). Written into the
            config as an absolute path.
        instances, dynamic_batching, max_queue_delay_us, intra_op_threads: as for
            ``triton_config``.

    Returns:
        The paths written, the config and its warnings.

    Raises:
        PackageError: the package cannot be read or served (``triton_config``), or
            write_bundle's errors (libraries, destination, signing).
        AotiDeployError (kind usage): a bad name, version or option combination.
        OpLibraryError, SigningUnavailableError: as for ``write_bundle``.
    """
    from ..package.bundle import read_layout
    from ..package.bundle_writer import write_bundle
    from ..runtime.trust import verifies_with

    package = Path(package)
    repository = Path(repository)
    check_model_name(name)
    if version is not None and (type(version) is not int or version < 1):
        raise _usage(f"invalid version {version!r}: a model version is a whole number, 1 or more")
    if keep_versions is not None and (type(keep_versions) is not int or keep_versions < 1):
        raise _usage(f"invalid keep_versions {keep_versions!r}: keep at least the newest version (1 or more)")
    policy = VersionPolicy.parse(version_policy) if isinstance(version_policy, str) else version_policy
    model_dir = repository / name
    if version is None:
        version = max(model_versions(model_dir), default=0) + 1
    key_path: Path | None = None
    if trusted_key is not None:
        key_path = Path(trusted_key).resolve()
        if not key_path.is_file():
            raise PackageError(f"trusted key not found: {trusted_key}", kind="bad_key")

    spec = _package_spec(package)
    try:
        config = triton_config(
            spec,
            name,
            instances=instances,
            dynamic_batching=dynamic_batching,
            max_queue_delay_us=max_queue_delay_us,
            intra_op_threads=intra_op_threads,
            trusted_key=key_path,
            version_policy=policy,
        )
    except PackageError as error:
        raise PackageError(f"{package}: {error}", kind=error.kind) from error
    warnings = list(config.warnings)
    if sign_key is not None and key_path is None:
        warnings.append(
            "the bundle is signed, but the config names no trusted key, so the backend loads it unverified; "
            "pass --trusted-key PUB.pem to have it verified"
        )
    if sign_key is None and key_path is not None:
        warnings.append(
            "the config names a trusted key, but the bundle is not signed, so the backend will refuse to load it; "
            "pass --sign-key KEY.pem (the private half of the trusted key)"
        )

    # A signed bundle is verified before it is published; an unsigned one under a
    # trusted key is published with the warning above (the backend will refuse it).
    check = verifies_with(key_path) if sign_key is not None and key_path is not None else None
    bundle = write_bundle(package, list(op_libraries), model_dir / str(version), sign_key, check_staged=check)
    config_path = model_dir / CONFIG_NAME
    _write_text(config_path, config.text())
    layout = read_layout(bundle)
    removed: list[int] = []
    if keep_versions is not None:
        for old in sorted(model_versions(model_dir), reverse=True)[keep_versions:]:
            if old != version:  # the version just published is never the one removed
                _remove_version(model_dir, old)
                removed.append(old)
    return RepositoryModel(
        repository=repository,
        name=name,
        version=version,
        config_path=config_path,
        bundle=bundle,
        config=config,
        signed=layout.signed,
        files=layout.files,
        warnings=warnings,
        versions=tuple(model_versions(model_dir)),
        removed=tuple(sorted(removed)),
    )


def model_versions(model_dir: str | os.PathLike[str]) -> list[int]:
    """The version folders of a model, as Triton counts them: sub-folders named by a
    whole number >= 1 without a leading zero (hidden staging folders are not)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and not p.name.startswith("0"))


def _remove_version(model_dir: Path, version: int) -> None:
    """Take a version out of the repository: renamed to a hidden name first (a polling
    server sees it gone at once, never half-deleted), then deleted."""
    import shutil

    hidden = Path(tempfile.mkdtemp(dir=model_dir, prefix=f".{version}.", suffix=".removed"))
    try:
        os.rename(model_dir / str(version), hidden / str(version))
    except OSError as error:
        shutil.rmtree(hidden, ignore_errors=True)
        raise PackageError(f"could not remove version {version} of {model_dir}: {error.strerror or error}",
                           kind="bundle_output") from error
    shutil.rmtree(hidden, ignore_errors=True)


def _write_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then a rename."""
    temporary: Path | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
        ) as file:
            temporary = Path(file.name)
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise PackageError(f"could not write {path}: {error.strerror or error}", kind="bundle_output") from error


# --- Reading a repository back (serve_triton) -----------------------------------------


@dataclass(frozen=True)
class ServedModel:
    """A model of a repository as the server will load it: the versions its
    version_policy serves, and the newest of them (``version``, ``bundle``, ``spec``),
    which a request without a version reaches."""

    name: str
    config: Any  # tritonclient's model_config_pb2.ModelConfig
    version: int
    bundle: Path
    spec: PackageSpec
    versions: tuple[int, ...] = ()  # every served version, oldest first
    policy: VersionPolicy = field(default_factory=lambda: VersionPolicy("latest"))

    @property
    def trusted_key(self) -> Path | None:
        value = self.config.parameters.get(PARAM_TRUSTED_KEY)
        return Path(value.string_value) if value is not None and value.string_value else None


def parse_config(path: str | os.PathLike[str]) -> Any:
    """Parse a config.pbtxt with Triton's own grammar (tritonclient's ModelConfig).

    Raises:
        TritonUnavailableError: tritonclient is not installed.
        PackageError: the file cannot be read or parsed.
    """
    from .triton_server import require_triton_client

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


def read_repository(repository: str | os.PathLike[str], names: Sequence[str] = ()) -> list[ServedModel]:
    """The models of a repository (the given ones, else every folder with a
    config.pbtxt), each with its config and the versions its version_policy serves
    (Triton's default: the latest), each read as a bundle.

    Raises:
        AotiDeployError (kind usage): no such repository or model, or a model with
            no version folder.
        PackageError: a config or bundle that cannot be read.
    """
    from ..package.archive import read_package_spec
    from ..package.bundle import read_layout

    repository = Path(repository)
    if not repository.is_dir():
        raise _usage(f"model repository not found: {repository} (write one with aoti-deploy triton-repository)")
    if names:
        for name in names:
            if not (repository / check_model_name(name) / CONFIG_NAME).is_file():
                raise _usage(f"no model {name!r} in {repository}: {repository / name / CONFIG_NAME} does not exist")
        chosen = list(names)
    else:
        chosen = sorted(p.name for p in repository.iterdir() if (p / CONFIG_NAME).is_file())
        if not chosen:
            raise _usage(f"{repository} holds no model (no <name>/{CONFIG_NAME}); write one with "
                         "aoti-deploy triton-repository")
    models = []
    for name in chosen:
        model_dir = repository / name
        config = parse_config(model_dir / CONFIG_NAME)
        available = model_versions(model_dir)
        if not available:
            raise _usage(f"model {name} in {repository} has no version folder (e.g. {model_dir / '1'})")
        policy = VersionPolicy.of_config(config)
        served = policy.served(available)
        if not served:
            raise _usage(
                f"model {name} in {repository}: its version_policy ({policy}) serves none of the versions there "
                f"({', '.join(map(str, available))}); publish one of them or change the policy"
            )
        newest = served[-1]
        for version in served:  # every served version must be a readable bundle
            layout = read_layout(model_dir / str(version))
            spec = read_package_spec(layout.package)
            if version == newest:
                models.append(ServedModel(name, config, newest, model_dir / str(newest), spec, served, policy))
    return models
