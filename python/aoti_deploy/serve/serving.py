"""A Triton model repository served: tritonserver started on loopback with this
checkout's aoti backend, ready with every model asked for, checked request by request,
and stopped (or left running). The one lifecycle ``aoti_deploy.serve_repository`` and
``aoti-deploy serve`` share."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._closing import ClosedOnExit
from ..locate import triton_backend_dir
from .serve_check import RequestCheck, check_served_model
from .served_models import ServedModel, read_repository
from .triton_client import ModelStatistics, model_statistics
from .triton_install import require_triton_client
from .triton_server import TritonServer


@dataclass
class Serving(ClosedOnExit):
    """A started tritonserver and the models it serves, ready."""

    server: TritonServer
    models: list[ServedModel]
    ready_seconds: float

    def check(self, model: ServedModel, requests: int = 8,
              on_check: Callable[[RequestCheck], None] | None = None) -> list[RequestCheck]:
        """Random and special-value requests to ``model`` over HTTP and gRPC, each
        output compared bit for bit (see serve_check.py)."""
        return check_served_model(self.server, model, requests, on_check=on_check)

    def statistics(self, model: ServedModel) -> ModelStatistics:
        return model_statistics(self.server.http_url, model.name)

    def close(self) -> int | None:
        """Stop the server; its exit code."""
        return self.server.stop()


def serve_repository(
    repository: str | os.PathLike[str],
    models: Sequence[str] = (),
    *,
    keep: bool = False,
    log_file: str | os.PathLike[str] | None = None,
    http_port: int | None = None,
    grpc_port: int | None = None,
    metrics_port: int | None = None,
    timeout: float = 120.0,
    on_started: Callable[[TritonServer], None] | None = None,
) -> Serving:
    """Start tritonserver on ``repository`` and wait until ``models`` (default: every
    model in it) are ready. Without ``keep`` the server also dies with this process,
    however it ends; it is stopped here if it does not get ready.

    Args:
        log_file: where the server's output goes (default: a new file in the temp
            folder).
        http_port: the HTTP port on 127.0.0.1 (default: a free one).
        grpc_port: the gRPC port on 127.0.0.1 (default: a free one).
        metrics_port: the metrics port (default: a free one).
        on_started: called once the process runs, before the wait (progress).

    Raises:
        AotiDeployError: the triton extra or backend is missing, the repository or a
            model is unreadable, or the server did not get ready in ``timeout``.
    """
    require_triton_client()
    served = read_repository(repository, list(models))
    backend_dir = triton_backend_dir()
    if log_file is None:
        handle, name = tempfile.mkstemp(prefix="tritonserver_", suffix=".log")
        os.close(handle)
        log_file = name
    server = TritonServer()
    started = time.perf_counter()
    try:
        server.start(Path(repository), backend_dir=backend_dir, log_file=Path(log_file), die_with_parent=not keep,
                     http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port)
        if on_started is not None:
            on_started(server)
        server.wait_ready(timeout, models=[m.name for m in served])
    except BaseException:  # Ctrl-C too: never leave the server behind
        server.stop()
        raise
    return Serving(server, served, time.perf_counter() - started)
