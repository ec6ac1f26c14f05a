"""Loads op libraries: the project's (libidentity_conv_ops.so, then its Python side
from fakes.py) and any other a model needs, and remembers which op namespaces each
library registered, so a package can record the libraries it needs."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import OpLibraryError
from .fakes import OP_NAME, register_fakes

LIBRARY_NAME = "libidentity_conv_ops.so"
LIBRARY_ENV_VAR = "IDENTITY_CONV_OPS_LIB"

_REPO_ROOT = Path(__file__).resolve().parents[3]
_loaded_path: Path | None = None


def library_candidates(path: str | os.PathLike[str] | None = None) -> list[Path]:
    """The places the loader looks for the library, in order.

    Args:
        path: an explicit path; when given it is the only candidate.

    Returns:
        The explicit path, else ``$IDENTITY_CONV_OPS_LIB``, then ``build/`` in the
        current directory and in the source checkout.
    """
    if path is not None:
        return [Path(path)]
    candidates = []
    if os.environ.get(LIBRARY_ENV_VAR):
        candidates.append(Path(os.environ[LIBRARY_ENV_VAR]))
    candidates.append(Path.cwd() / "build" / LIBRARY_NAME)
    candidates.append(_REPO_ROOT / "build" / LIBRARY_NAME)
    unique: list[Path] = []
    for candidate in candidates:
        if candidate.resolve() not in [u.resolve() for u in unique]:
            unique.append(candidate)
    return unique


def load_op_library(path: str | os.PathLike[str] | None = None) -> Path:
    """Load the op library once, then register its fakes. Safe to call again.

    Args:
        path: the library to load; defaults to the search in ``library_candidates``.

    Returns:
        The resolved path of the loaded library.

    Raises:
        OpLibraryError: no candidate exists, loading failed, or a different library
            file was already loaded in this process.
    """
    global _loaded_path
    if _loaded_path is not None and path is None:
        return _loaded_path
    candidates = library_candidates(path)
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        tried = "\n".join(f"  - {c}" for c in candidates)
        raise OpLibraryError(
            f"could not find the op library {LIBRARY_NAME}. Tried:\n{tried}\n"
            f"Build it with ./scripts/setup.sh, or pass its path "
            f"(--op-lib PATH, or set {LIBRARY_ENV_VAR})."
        )
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
        raise OpLibraryError(
            f"could not load the op library {found}: {error}\n"
            "Rebuild it against this environment's torch with ./scripts/setup.sh."
        ) from error
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
            raise OpLibraryError(
                f"could not find the op library {path}.\nBuild it, or fix the path given with --op-lib."
            )
        resolved = path.resolve()
        if str(resolved) not in _loaded_library_paths():
            try:
                _load_and_record(resolved)
            except OSError as error:
                raise OpLibraryError(
                    f"could not load the op library {path}: {error}\n"
                    "Rebuild it against this environment's torch."
                ) from error
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


def _loaded_library_paths() -> list[str]:
    return sorted(str(Path(p).resolve()) for p in torch.ops.loaded_libraries)


def _has_schema(qualname: str) -> bool:
    namespace, name = qualname.split("::")
    return hasattr(getattr(torch.ops, namespace), name)
