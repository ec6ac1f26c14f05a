"""Package files on disk: the checks before a .pt2 is opened, reading its metadata
(and so its spec) without loading the compiled code, and rewriting metadata."""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ..errors import PackageError
from .spec import PackageSpec

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


def read_package_metadata(path: str | Path) -> dict[str, str]:
    """The metadata entries of the AOTI package at ``path`` (AOTI's and ours).

    Raises:
        PackageError: the file is missing, empty, not a zip, or not an AOTI package.
    """
    import torch

    path = Path(path)
    check_model_file(path, "package", _HINT)
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":
        raise PackageError(f"package is not a zip archive (an AOTI .pt2 package is one): {path}\n{_HINT}", kind="damaged")
    if not zipfile.is_zipfile(path):
        raise PackageError(
            f"could not read the AOTI package {path}: the zip archive is damaged or truncated (no central "
            f"directory).\n{_HINT}",
            kind="damaged",
        )
    loader_class = package_loader_class()
    if loader_class is None:
        raise PackageError(f"{no_loader_message()} (needed to read {path}).")
    try:
        metadata = loader_class.load_metadata_from_package(str(path), "model")
    except RuntimeError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise PackageError(
            f"could not read the AOTI package {path}: {first_line}\n"
            f"The file is damaged or is not an AOTI package. {_HINT}",
            kind="damaged",
        ) from error
    return dict(metadata)


def read_package_spec(path: str | Path) -> PackageSpec:
    """Check that ``path`` looks like an AOTI package and read its recorded spec.

    Raises:
        PackageError: the file is missing, empty, not a zip, not an AOTI package,
            or was not written by export_compile (SpecError).
    """
    return PackageSpec.from_metadata(read_package_metadata(path), path)


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
