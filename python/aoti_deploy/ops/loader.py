"""Loads op libraries: the project's (libidentity_conv_ops.so, then its Python side
from fakes.py) and any other a model needs, and remembers which op namespaces each
library registered, so a package can record the libraries it needs."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import OpLibraryError, PackageError
from ..locate import LIBRARY_NAME, op_library_path
from ..package.shared_object import check_shared_object_file
from .fakes import OP_NAME, register_fakes

_loaded_path: Path | None = None


def library_not_found(path: Path | str) -> str:
    """The message for a library path that names no file; aoti_runner's
    (cpp_runtime/core/op_libraries.cpp) has the same words."""
    return (
        f"op library not found: {path}. Build it (./scripts/setup.sh builds this project's libraries "
        "into build/), or correct the path."
    )


def library_not_loaded(path: Path | str, error: OSError) -> str:
    """The message for a library the dynamic loader refused, with the loader's own
    reason (torch.ops.load_library keeps it only as the cause of its OSError); the
    same words as aoti_runner's."""
    reason = str(error.__cause__ or error).strip() or type(error).__name__
    return (
        f"could not load op library {path}: {reason}. Pass a shared library built against this torch "
        "(./scripts/setup.sh builds this project's)."
    )


def load_op_library(path: str | os.PathLike[str] | None = None) -> Path:
    """Load the op library once, then register its fakes. Safe to call again.

    Args:
        path: the library to load; default: ``locate.op_library_path``.

    Returns:
        The resolved path of the loaded library.

    Raises:
        OpLibraryError: the library is not there, loading failed, or a different
            library file was already loaded in this process.
    """
    global _loaded_path
    if _loaded_path is not None and path is None:
        return _loaded_path
    found = op_library_path(path)
    if not found.is_file():
        raise OpLibraryError(library_not_found(found))
    if _loaded_path is not None:
        if found.resolve() != _loaded_path:
            raise OpLibraryError(
                f"the op library is already loaded from {_loaded_path}; "
                f"cannot load a second copy from {found.resolve()} in the same process"
            )
        return _loaded_path
    if _has_schema(OP_NAME) and str(found.resolve()) not in _loaded_library_paths():
        # A second copy would register my_ops again, and torch aborts the process then.
        raise OpLibraryError(
            f"{OP_NAME} is already registered in this process by another library "
            f"({', '.join(_loaded_library_paths()) or 'not loaded through torch.ops'}); "
            f"cannot also load {found}. Load one copy only."
        )
    try:
        _load_and_record(found)
    except OSError as error:
        raise OpLibraryError(library_not_loaded(found, error)) from error
    if not _has_schema(OP_NAME):
        raise OpLibraryError(
            f"{found} loaded, but it does not register {OP_NAME}; pass the "
            f"{LIBRARY_NAME} built from csrc/"
        )
    register_fakes()
    _loaded_path = found.resolve()
    return _loaded_path


def load_op_libraries(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """Load several op libraries in order: the project's through ``load_op_library``
    (which also registers its fakes), any other with ``torch.ops.load_library``.
    A library already loaded from the same file is not loaded again.

    Args:
        paths: the library files, e.g. from repeated ``--op-lib`` options.

    Returns:
        Their resolved paths.

    Raises:
        OpLibraryError: a file is missing or fails to load; the message names it.
    """
    global _loaded_path
    loaded = []
    for path in map(Path, paths):
        if path.name == LIBRARY_NAME:
            loaded.append(load_op_library(path))
            continue
        if not path.is_file():
            raise OpLibraryError(library_not_found(path))
        resolved = path.resolve()
        if str(resolved) not in _loaded_library_paths():
            try:
                _load_and_record(resolved)
            except OSError as error:
                raise OpLibraryError(library_not_loaded(path, error)) from error
        # The project's ops under another file name still need their fakes.
        if _loaded_path is None and "my_ops" in _namespaces_by_library.get(resolved, set()):
            register_fakes()
            _loaded_path = resolved
        loaded.append(resolved)
    return loaded


# The op namespaces each library registered when it loaded, to tell a package
# which libraries it needs.
_namespaces_by_library: dict[Path, set[str]] = {}


def _load_and_record(path: Path) -> None:
    # A truncated or foreign file would crash the dynamic loader (SIGBUS), not fail it.
    try:
        check_shared_object_file(path, f"op library {path}", "Rebuild it (./scripts/setup.sh builds this project's "
                                 "libraries into build/), or correct the path.")
    except PackageError as error:
        raise OpLibraryError(str(error)) from None
    before = set(torch._C._dispatch_get_all_op_names())
    torch.ops.load_library(str(path))
    added = set(torch._C._dispatch_get_all_op_names()) - before
    _namespaces_by_library[path.resolve()] = {name.split("::")[0] for name in added}


def libraries_for(qualnames: list[str]) -> list[str]:
    """File names of the loaded libraries that registered the namespaces of
    ``qualnames`` (ops or classes, ``ns::name``), sorted: the libraries a package
    that calls them needs. If a namespace has no known library (e.g. it was loaded
    by other means), every loaded library is named, to be safe."""
    names: set[str] = set()
    for qualname in qualnames:
        namespace = qualname.split("::")[0]
        owners = {path.name for path, spaces in _namespaces_by_library.items() if namespace in spaces}
        if not owners:
            return sorted({Path(p).name for p in torch.ops.loaded_libraries})
        names |= owners
    return sorted(names)


def namespaces_by_library(qualnames: list[str]) -> dict[str, list[str]]:
    """For each loaded library (by file name) that registered a namespace of
    ``qualnames``, those namespaces, sorted: recorded in a package so a runner can
    say which library each missing op needs."""
    wanted = {qualname.split("::")[0] for qualname in qualnames}
    found = {path.name: sorted(spaces & wanted) for path, spaces in _namespaces_by_library.items()}
    return {name: spaces for name, spaces in sorted(found.items()) if spaces}


def _loaded_library_paths() -> list[str]:
    return sorted(str(Path(p).resolve()) for p in torch.ops.loaded_libraries)


def _has_schema(qualname: str) -> bool:
    namespace, name = qualname.split("::")
    return hasattr(getattr(torch.ops, namespace), name)
