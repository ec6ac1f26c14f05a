"""Whether the optional ONNX extra is installed: asked by the ONNX target, the ONNX
runtime and the benchmarks, without importing onnx (nor torch) to find out."""

from __future__ import annotations

import importlib.util

from ..errors import AotiDeployError

# The PyPI packages of the extra, by import name.
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime", "onnxruntime_extensions")
EXTRA_HINT = (
    "Install the ONNX extra: pip install -e '.[onnx]' (onnx, onnxscript, onnxruntime and "
    "onnxruntime-extensions from PyPI)."
)


class OnnxUnavailableError(AotiDeployError):
    """The optional ONNX extra is not installed."""


def missing_onnx_packages() -> list[str]:
    """Import names of the extra's packages that are not installed."""
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def require_onnx() -> None:
    """Raise OnnxUnavailableError naming what is missing, with the install command."""
    missing = missing_onnx_packages()
    if missing:
        raise OnnxUnavailableError(f"the ONNX target needs {', '.join(missing)}, which is not installed. {EXTRA_HINT}")


def onnx_wanted(flag: bool | None) -> bool:
    """Resolve a CLI's ``--onnx/--no-onnx``: on (the extra must be installed), off, or,
    when not given (None), on exactly when the extra is installed."""
    if flag:
        require_onnx()
    return flag if flag is not None else not missing_onnx_packages()
