"""Where the build's outputs are: the op library, the C++ runner and the Triton
backend. Every CLI finds them here, the same way from any folder: a path given on the
command line, else the environment, else the build folder of the source checkout this
package was imported from. A path set in the environment is honoured or is an error, never skipped."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .errors import AotiDeployError, OpLibraryError

LIBRARY_NAME = "libidentity_conv_ops.so"
RUNNER_NAME = "aoti_runner"
LIBRARY_ENV_VAR = "AOTI_DEPLOY_OPS_LIB"
BUILD_DIR_ENV_VAR = "AOTI_DEPLOY_BUILD_DIR"
# tritonserver --backend-directory=DIR opens DIR/<backend>/libtriton_<backend>.so.
TRITON_BACKEND_NAME = "aoti"
TRITON_BACKEND_LIBRARY = f"libtriton_{TRITON_BACKEND_NAME}.so"

# python/aoti_deploy/locate.py -> the checkout's root.
REPO_ROOT = Path(__file__).resolve().parents[2]


def build_dir() -> tuple[Path, str]:
    """The build folder and where that choice came from, for messages:
    ``$AOTI_DEPLOY_BUILD_DIR`` (absolute, or relative to the checkout's root),
    else ``build/`` in the checkout."""
    value = os.environ.get(BUILD_DIR_ENV_VAR)
    if value:
        return REPO_ROOT / value, f"${BUILD_DIR_ENV_VAR}"
    return REPO_ROOT / "build", "this checkout's build folder"


def op_library_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The project's op library to load.

    Args:
        path: a path the user gave (e.g. ``--op-lib``); it is returned as given, and
            the loader reports it if it does not exist.

    Returns:
        ``path``, else ``$AOTI_DEPLOY_OPS_LIB``, else ``libidentity_conv_ops.so``
        in ``build_dir()``.

    Raises:
        OpLibraryError: the variable names no file, or the build folder holds no library.
    """
    if path is not None:
        return Path(path)
    value = os.environ.get(LIBRARY_ENV_VAR)
    if value:
        if not Path(value).is_file():
            raise OpLibraryError(
                f"{LIBRARY_ENV_VAR} is set to {value}, which does not exist. Point it at {LIBRARY_NAME}, "
                "or unset it to use this checkout's build folder."
            )
        return Path(value)
    return _built_file(LIBRARY_NAME, lambda folder, origin: OpLibraryError(
        f"could not find the op library {LIBRARY_NAME} in {folder} ({origin}). Build it with "
        f"./scripts/setup.sh, or pass its path (--op-lib PATH, or set {LIBRARY_ENV_VAR})."
    ))


def runner_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The C++ runner: ``path`` (``--runner``), else ``aoti_runner`` in ``build_dir()``.

    Raises:
        AotiDeployError: that file does not exist.
    """
    if path is not None:
        if not Path(path).is_file():
            raise AotiDeployError(f"C++ runner not found: {path} (given with --runner).")
        return Path(path)
    return _built_file(RUNNER_NAME, lambda folder, origin: AotiDeployError(
        f"C++ runner not found: {folder / RUNNER_NAME} ({origin}). Build it with ./scripts/setup.sh, or pass --runner."
    ))


def _built_file(name: str, missing: Callable[[Path, str], Exception]) -> Path:
    """``name`` in ``build_dir()``; ``missing(folder, origin)`` raised when it is not there."""
    folder, origin = build_dir()
    if not (folder / name).is_file():
        raise missing(folder, origin)
    return folder / name


def triton_backends_dir() -> tuple[Path, str]:
    """The folder to give tritonserver as ``--backend-directory`` (``backends/`` in
    ``build_dir()``), built or not, and where that choice came from."""
    folder, origin = build_dir()
    return folder / "backends", origin


def triton_backend_dir() -> Path:
    """The backend directory holding this project's Triton backend
    (``backends/aoti/libtriton_aoti.so`` in ``build_dir()``).

    Raises:
        AotiDeployError: the backend library has not been built there.
    """
    folder, origin = triton_backends_dir()
    library = folder / TRITON_BACKEND_NAME / TRITON_BACKEND_LIBRARY
    if not library.is_file():
        raise AotiDeployError(
            f"Triton backend not found: {library} ({origin}). Build it with ./scripts/setup.sh, or "
            f"cmake --build {folder.parent}."
        )
    return folder
