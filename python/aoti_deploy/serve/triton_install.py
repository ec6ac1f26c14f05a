"""Whether the triton extra is installed: pytriton's bundled tritonserver and
tritonclient (HTTP and gRPC), found without importing either, or an error that says
how to install them."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from ..errors import AotiDeployError

TRITON_EXTRA = "pip install -e '.[triton]' (nvidia-pytriton, tritonclient[http,grpc])"


class TritonUnavailableError(AotiDeployError):
    """The triton extra (pytriton's tritonserver, tritonclient) is not installed."""


def tritonserver_binary() -> Path:
    """pytriton's bundled Triton server, found without importing pytriton.

    Raises:
        TritonUnavailableError: nvidia-pytriton is not installed, or has no server.
    """
    found = importlib.util.find_spec("pytriton")
    if found is None or not found.submodule_search_locations:
        raise TritonUnavailableError(f"Triton Inference Server is not installed; install the triton extra: {TRITON_EXTRA}")
    for location in found.submodule_search_locations:
        binary = Path(location) / "tritonserver" / "bin" / "tritonserver"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    raise TritonUnavailableError(
        f"pytriton is installed at {', '.join(found.submodule_search_locations)} but holds no executable "
        f"tritonserver/bin/tritonserver; reinstall the triton extra: {TRITON_EXTRA}"
    )


def require_triton_client() -> None:
    """Raises TritonUnavailableError when tritonclient (HTTP and gRPC) is missing."""
    for module in ("tritonclient.http", "tritonclient.grpc"):
        try:
            missing = importlib.util.find_spec(module) is None
        except ModuleNotFoundError:
            missing = True
        if missing:
            raise TritonUnavailableError(f"{module} is not installed; install the triton extra: {TRITON_EXTRA}")
