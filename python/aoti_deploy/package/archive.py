"""Package files on disk: the checks before a .pt2 is opened, reading its metadata
(and so its spec) without loading the compiled code, and rewriting metadata."""

from __future__ import annotations

import json
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..errors import PackageError
from .json_text import JsonTextError, parse_json_limited
from .shared_object import check_shared_object
from .spec import PackageSpec
from .zip_check import ZipEntry, index_zip, read_entry

_HINT = "Create it with `export_compile` (default output artifacts/model.pt2)."


def check_model_file(path: Path, what: str, hint: str) -> None:
    """Raise PackageError, naming ``what`` and ending with ``hint``, if ``path`` is
    missing, not a file, or empty."""
    if not path.exists():
        raise PackageError(f"{what} not found: {path}\n{hint}", kind="not_found")
    if not path.is_file():
        raise PackageError(f"{what} path is not a file: {path}\n{hint}", kind="not_found")
    if path.stat().st_size == 0:
        raise PackageError(f"{what} is empty (0 bytes): {path}\n{hint}", kind="damaged")


def package_loader_class() -> Any | None:
    """torch's C++ package loader (``torch._C._aoti.AOTIModelPackageLoader``), or None
    where this torch build does not bind it."""
    import torch

    return getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)


def no_loader_message() -> str:
    import torch

    return (f"torch {torch.__version__} cannot load AOTInductor packages from Python: it has no "
            "torch._C._aoti.AOTIModelPackageLoader. Run the package with aoti_runner, or use a torch build with "
            "AOTInductor")


_DAMAGED_HINT = "The file is damaged or is not an AOTI package; re-create it with `export_compile`."
# Metadata and the loader's other JSON files are small; this bounds what a crafted
# entry can make the reader allocate.
_MAX_JSON_ENTRY = 64 << 20


def _damaged(path: Path, why: str) -> PackageError:
    return PackageError(f"could not read the AOTI package {path}: {why}.\n{_DAMAGED_HINT}", kind="damaged")


def _model_directory(entries: list[ZipEntry]) -> str:
    """The folder torch's loader extracts, as it finds it: "data/aotinductor/<model>"
    under the prefix the first two entries share."""
    prefix0, prefix1 = (entry.name.split("/", 1)[0] for entry in entries[:2])
    prefix = f"{prefix0}/" if prefix0 and prefix0 == prefix1 else ""
    return f"{prefix}data/aotinductor/model"


def read_package_metadata(path: str | Path) -> dict[str, str]:
    """The metadata entries of the AOTI package at ``path`` (AOTI's and ours), read
    without torch, once everything torch's package loader would trust is checked: the
    zip structure and entry paths (it extracts under a temporary folder by name), every
    JSON file it parses, and every shared library it would load. The metadata is what
    torch's ``load_metadata_from_package`` reads: the first "*wrapper_metadata.json" in
    the model's folder, an object of strings. The same checks and words as
    cpp_runtime/core/package_file.cpp.

    Raises:
        PackageError: the file is missing, empty, not a zip, damaged or crafted, or
            not an AOTI package.
    """
    path = Path(path)
    check_model_file(path, "package", _HINT)
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":
        raise PackageError(f"package is not a zip archive (an AOTI .pt2 package is one): {path}\n{_HINT}", kind="damaged")
    try:
        entries = index_zip(path, "it")
    except PackageError as error:
        raise _damaged(path, str(error).removesuffix(".")) from None
    if len(entries) < 2:
        raise _damaged(path, f"it has {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, and an AOTI package "
                             "has its model's files")
    directory = _model_directory(entries)
    metadata_entry: ZipEntry | None = None
    for entry in entries:
        in_model = entry.name.startswith(directory)
        if entry.name.endswith(".json"):
            if entry.size > _MAX_JSON_ENTRY:
                raise _damaged(path, f"{entry.name} is {entry.size} bytes, larger than any AOTI JSON file")
            try:
                parse_json_limited(read_entry(path, entry))
            except JsonTextError as error:
                raise _damaged(path, f"{entry.name} is not valid JSON ({error})") from None
            if in_model and metadata_entry is None and entry.name.endswith("wrapper_metadata.json"):
                metadata_entry = entry
        # Any library, wherever it sits: torch also extracts data/constants/* into the
        # model's folder (by file name) and loads the .so it finds there.
        if entry.name.endswith(".so"):
            check_shared_object(entry.size, lambda offset, n, entry=entry: read_entry(path, entry, offset, n),
                                f"the model library {entry.name} in {path}", "Re-create the package with export_compile.")
    if metadata_entry is None:
        raise _damaged(path, f"it has no {directory}/*wrapper_metadata.json (not an AOTI package, or one of another "
                             "model name)")
    document = parse_json_limited(read_entry(path, metadata_entry))
    if not isinstance(document, dict):
        raise _damaged(path, f"{metadata_entry.name} is not a JSON object")
    for key, value in document.items():
        if not isinstance(value, str):
            raise _damaged(path, f"{metadata_entry.name}: the value of {json.dumps(key)[:80]} is not a string")
    return document


def read_package_spec(path: str | Path) -> PackageSpec:
    """Check that ``path`` looks like an AOTI package and read its recorded spec,
    checked against the compiled model's own input checks (``check_spec_against_compiled``).

    Raises:
        PackageError: the file is missing, empty, not a zip, not an AOTI package,
            was not written by export_compile (SpecError), or its spec does not match
            its compiled model.
    """
    spec = PackageSpec.from_metadata(read_package_metadata(path), path)
    check_spec_against_compiled(spec, path)
    return spec


# A large model's generated wrapper is still far below this.
_MAX_WRAPPER_SOURCE = 256 << 20
_HANDLE = re.compile(r"ConstantHandle (\w+) = ConstantHandle\(input_handles\[(\d{1,18})\]\);")
_DTYPE = re.compile(r" (\w+)_expected_dtype = aoti_torch_dtype_(\w+)\(\);")
_STATIC_DIM = re.compile(r'"input_handles\[(\d{1,18})\]: unmatched dim value at (\d{1,18}), "\s*\n[^\n]*"expected: (\d{1,18}), ')


def compiled_inputs(source: str) -> dict[int, tuple[str, dict[int, int]]]:
    """What the compiled model checks of each input, read from the generated wrapper
    source: its dtype and its static dims (see cpp_runtime/core/package_file.cpp).
    Dynamic dims' ranges are not read: AOTI checks them as >= 2 where export allows 1,
    and kernels index them by the actual size."""
    handles = {name: int(index) for name, index in _HANDLE.findall(source)}
    inputs: dict[int, tuple[str, dict[int, int]]] = {index: ("", {}) for index in handles.values()}
    for name, dtype in _DTYPE.findall(source):
        if name in handles:
            inputs[handles[name]] = (dtype, inputs[handles[name]][1])
    for index, dim, size in _STATIC_DIM.findall(source):
        inputs.setdefault(int(index), ("", {}))[1][int(dim)] = int(size)
    return inputs


def check_spec_against_compiled(spec: PackageSpec, path: str | Path) -> None:
    """The spec must agree with the compiled model's own input checks, read from the
    generated wrapper source the package carries: each input's dtype and static dims.
    A spec that lies (a dim dynamic that the kernels have static) would let a smaller
    input reach kernels that read past it. The same words as aoti_runner's.

    Raises:
        PackageError: kind "spec_mismatch".
    """
    path = Path(path)
    entries = index_zip(path, f"the AOTI package {path}")
    directory = _model_directory(entries)
    source = next((e for e in entries if e.name.startswith(directory) and e.name.endswith("wrapper.cpp")), None)

    def mismatch(what: str) -> PackageError:
        return PackageError(
            f"the package's spec does not match its compiled model: {what}. The package is damaged or was tampered "
            "with; re-create it with export_compile.",
            kind="spec_mismatch",
        )

    # Fails closed: a package without the source, or with checks this cannot read, is
    # refused rather than trusted.
    if source is None:
        raise mismatch(f"it carries no generated wrapper source ({directory}/*wrapper.cpp) to check the spec against")
    if source.size > _MAX_WRAPPER_SOURCE:
        raise mismatch(f"{source.name} is {source.size} bytes, larger than any generated wrapper")
    compiled = compiled_inputs(read_entry(path, source).decode("utf-8", errors="replace"))
    if len(compiled) != len(spec.inputs):
        raise mismatch(f"the spec lists {len(spec.inputs)} input(s), but the wrapper source checks {len(compiled)}")
    for index, (dtype, static_dims) in sorted(compiled.items()):
        name = f"input[{index}]"
        if index >= len(spec.inputs):
            raise mismatch(f"the compiled model takes {name}, which the spec does not list")
        declared = spec.inputs[index]
        if not dtype:
            raise mismatch(f"the wrapper source checks no dtype for {name}")
        if dtype != declared.dtype:
            raise mismatch(f"the spec says {name} is {declared.dtype}, but the model was compiled for {dtype}")
        for dim, size in sorted(static_dims.items()):
            if dim >= len(declared.dims):
                raise mismatch(f"the model was compiled for {name} with a dim {dim}, which the spec does not have")
            bounds = declared.dims[dim]
            if not bounds.is_static or bounds.min != size:
                raise mismatch(f"the spec says {name} dim {dim} is {bounds}, but the model was compiled for exactly "
                               f"{size}")


def rewrite_package_metadata(source: str | Path, target: str | Path, changes: dict[str, str | None]) -> Path:
    """Copy an AOTI package to ``target`` (which may be ``source``), setting the given
    entries in the metadata JSON files it carries; a value of None deletes the key.
    The copy is written to a temporary file beside ``target`` and renamed over it, so
    ``target`` is never left half-written.

    Raises:
        PackageError: the package cannot be read or written.
    """
    source, target = Path(source), Path(target)
    temporary: Path | None = None
    try:
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False) as tmp:
            temporary = Path(tmp.name)
        with zipfile.ZipFile(source) as src, zipfile.ZipFile(temporary, "w") as dst:
            for item in src.infolist():
                data = src.read(item.filename)
                if item.filename.endswith("_metadata.json"):
                    metadata = json.loads(data)
                    for key, value in changes.items():
                        if value is None:
                            metadata.pop(key, None)
                        else:
                            metadata[key] = value
                    data = json.dumps(metadata).encode()
                dst.writestr(item, data)
        os.replace(temporary, target)
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise PackageError(f"could not rewrite the metadata of {source} into {target}: {error}") from error
    return target
