"""A tritonserver process (pytriton's bundled server, the triton extra) on loopback
ports with this project's backend directory: started, waited on until it and its models
are ready, told to load and unload models, watched (memory, descriptors, mapped files)
and stopped by its PID."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from .loopback import LOOPBACK, LoopbackProcess, free_ports
from .triton_client import ServingError, control_model, model_ready, model_states, server_live
from .triton_install import tritonserver_binary

_LOG_TAIL_LINES = 25


class TritonServer(LoopbackProcess):
    """A tritonserver process bound to 127.0.0.1. Stopped by its PID (SIGTERM, then
    SIGKILL), on ``stop`` or on leaving a ``with`` block::

        with TritonServer().start(repository, backend_dir=triton_backend_dir(), log_file=log) as server:
            server.wait_ready(60, models=["identity_conv"])
            infer(server.http_url, "http", "identity_conv", [x])
    """

    error = ServingError
    not_started = "the server was not started"

    def __init__(self, binary: str | os.PathLike[str] | None = None) -> None:
        super().__init__(Path(binary) if binary is not None else tritonserver_binary())
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.command: list[str] = []

    def start(
        self,
        repository: str | os.PathLike[str],
        *,
        backend_dir: str | os.PathLike[str],
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        log_file: str | os.PathLike[str],
        model_control_explicit: bool = False,
        extra_args: Sequence[str] = (),
        die_with_parent: bool = True,
        env: dict[str, str] | None = None,
    ) -> "TritonServer":
        """Launch tritonserver on ``repository`` (ports left None are picked with
        ``free_ports``), its stdout and stderr appended to ``log_file``. A model that
        fails to load does not stop it (--exit-on-error=false; Triton's default is to
        exit). It runs in its own session (a Ctrl-C in the terminal is this process's to
        handle); with ``die_with_parent`` the kernel also sends it SIGTERM when this
        process ends, however it ends (PR_SET_PDEATHSIG), so no server outlives a
        killed test run. Without, it outlives this process if not stopped (--keep).
        ``env`` adds to (or overrides) this process's environment for the server, e.g.
        TMPDIR, where the backend's loaders extract packages.

        Returns:
            self, started (not yet ready: see ``wait_ready``).

        Raises:
            ServingError: already started, or the process could not be launched.
        """
        if self.process is not None:
            raise ServingError(f"this server was already started (pid {self.process.pid})")
        given = {port for port in (http_port, grpc_port, metrics_port) if port}
        picked = iter([port for port in free_ports(6) if port not in given])
        self.http_port = http_port or next(picked)
        self.grpc_port = grpc_port or next(picked)
        self.metrics_port = metrics_port or next(picked)
        self.log_file = Path(log_file)
        self.command = [
            str(self.binary),
            f"--model-repository={Path(repository).resolve()}",
            f"--backend-directory={Path(backend_dir).resolve()}",
            f"--http-address={LOOPBACK}",
            f"--http-port={self.http_port}",
            f"--grpc-address={LOOPBACK}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={LOOPBACK}",
            f"--metrics-port={self.metrics_port}",
            "--exit-on-error=false",
            *(["--model-control-mode=explicit"] if model_control_explicit else []),
            *extra_args,
        ]
        self._launch(self.command, die_with_parent=die_with_parent, env=env)
        return self

    @property
    def http_url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """host:port, as tritonclient.grpc takes it."""
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the server's log."""
        if self.log_file is None or not self.log_file.is_file():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def _exited(self, what: str) -> ServingError:
        code = self.process.returncode if self.process is not None else None
        return ServingError(
            f"tritonserver exited (code {code}) {what}; the end of its log {self.log_file}:\n{self.log_tail()}",
            kind="exited",
        )

    def wait_ready(self, timeout: float = 60.0, models: Sequence[str] = ()) -> None:
        """Wait until the server is live (GET /v2/health/live) and each of ``models`` is
        ready. Live, not /v2/health/ready: with Triton's strict readiness (kept, so a
        probe sees a broken model) one model that failed to load keeps the server
        unready, while the others serve.

        Raises:
            ServingError: the process exited (with its log's tail), a model is
                unavailable (with Triton's reason), or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        pending = list(models)
        live = False
        while True:
            if not self.running():
                raise self._exited("before it was ready")
            if not live:
                live = server_live(self.http_url)
            if live:
                pending = [model for model in pending if not model_ready(self.http_url, model)]
                if not pending:
                    return
                for state in model_states(self.http_url):
                    if state.name in pending and state.state == "UNAVAILABLE":
                        raise ServingError(
                            f"model {state.name} (version {state.version}) did not load: {state.reason or 'no reason given'} "
                            f"(server log: {self.log_file})",
                            kind="model_unavailable",
                        )
            if time.monotonic() > deadline:
                waiting = f"models {', '.join(pending)} to be ready" if live else "the server to be live"
                raise ServingError(
                    f"timed out after {timeout:g} s waiting for {waiting} at {self.http_url}; the end of its log "
                    f"{self.log_file}:\n{self.log_tail()}",
                    kind="timeout",
                )
            time.sleep(0.1)

    def load_model(self, model: str) -> None:
        """Load (or reload) a model; explicit model-control mode only.

        Raises:
            ServingError: Triton refused, with its message.
        """
        control_model(self.http_url, model, "load")

    def unload_model(self, model: str) -> None:
        control_model(self.http_url, model, "unload")

    def rss_bytes(self) -> int:
        """The server's resident memory (VmRSS of /proc/PID/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise ServingError(f"no VmRSS in /proc/{self.pid}/status")

    def open_fds(self) -> int:
        """How many file descriptors the server holds open (entries of /proc/PID/fd)."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def mapped_objects(self) -> list[str]:
        """The files mapped into the server (from /proc/PID/maps), sorted, each once; a
        deleted file keeps the kernel's " (deleted)" suffix."""
        paths = set()
        for line in Path(f"/proc/{self.pid}/maps").read_text().splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5])
        return sorted(paths)
