"""HAProxy (Debian's haproxy package) as the load balancer in front of tritonserver
replicas: its config, written from the replicas' HTTP ports, the process on loopback
stopped by its PID, and its admin socket (each server's state, retries, drain)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import AotiDeployError
from .loopback import LOOPBACK, LoopbackProcess, free_ports

HAPROXY_INSTALL = "apt-get install haproxy (Debian's package; ./scripts/fleet_demo.sh installs it when missing)"
BACKEND = "replicas"


class HAProxyUnavailableError(AotiDeployError):
    """haproxy is not installed."""


class LoadBalancerError(AotiDeployError):
    """HAProxy did not start, exited, refused its config, or its socket did not answer."""


def haproxy_binary() -> Path:
    """The haproxy executable on PATH (or /usr/sbin, where Debian puts it).

    Raises:
        HAProxyUnavailableError: not installed.
    """
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise HAProxyUnavailableError(f"haproxy is not installed; {HAPROXY_INSTALL}")
    return Path(found)


@dataclass(frozen=True)
class HealthCheck:
    """HAProxy's active health check of each replica: GET /v2/health/ready every
    ``interval_ms`` (``fast_ms`` while a state change is pending); ``fall`` failures
    in a row take a replica out of rotation, ``rise`` successes bring it back."""

    interval_ms: int = 200
    fast_ms: int = 100
    fall: int = 2
    rise: int = 2


def haproxy_config(
    frontend_port: int,
    replica_ports: Sequence[int],
    stats_socket: str | os.PathLike[str],
    *,
    health: HealthCheck = HealthCheck(),
    retries: int = 3,
) -> str:
    """HAProxy's config: an HTTP frontend on 127.0.0.1:``frontend_port`` balancing
    round robin over the replicas' HTTP ports, each checked on /v2/health/ready.

    Inference is idempotent (the same inputs give the same bits whichever replica
    answers), so a request that meets a dead replica is sent again: ``retry-on
    conn-failure empty-response junk-response 503`` re-sends it when the connection
    is refused, or closes with no or a broken response (a replica killed while
    answering), ``retries`` times, each to another replica (``option redispatch 1``).
    HAProxy re-sends only a request it still holds whole, so the buffer is raised to
    hold a request of this size (tune.bufsize)."""
    lines = [
        "global",
        "    maxconn 512",
        "    tune.bufsize 262144",
        f"    stats socket {Path(stats_socket)} mode 600 level admin",
        "    log stdout format raw daemon",
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    option dontlog-normal",  # log only what went wrong, or was retried
        "    timeout connect 1s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout check 1s",
        f"    retries {retries}",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response junk-response 503",
        "",
        "frontend inference",
        f"    bind {LOOPBACK}:{frontend_port}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        "    balance roundrobin",
        "    option httpchk GET /v2/health/ready",
        "    http-check expect status 200",
        f"    default-server check inter {health.interval_ms}ms fastinter {health.fast_ms}ms "
        f"downinter {health.interval_ms}ms fall {health.fall} rise {health.rise}",
    ]
    lines += [f"    server {replica_name(i)} {LOOPBACK}:{port}" for i, port in enumerate(replica_ports)]
    return "\n".join(lines) + "\n"


def replica_name(index: int) -> str:
    return f"replica{index}"


class ServerState(NamedTuple):
    """One replica as HAProxy sees it (its `show stat` row)."""

    name: str
    status: str  # UP, DOWN, DRAIN, MAINT, "UP 1/2" (going down), "DOWN 1/2" (coming up), ...
    sessions: int  # current sessions (scur)
    total: int  # sessions so far (stot)
    retries: int  # requests re-sent to another try (wretr)
    redispatches: int  # requests moved to another replica (wredis)

    @property
    def up(self) -> bool:
        return self.status == "UP"


class HAProxy(LoopbackProcess):
    """An haproxy process on 127.0.0.1 in the foreground (-db), its log (stdout and
    stderr) appended to a file, stopped by its PID (SIGTERM, then SIGKILL)::

        with HAProxy().start(config_dir, replica_ports=[p0, p1]) as balancer:
            balancer.wait_up(2, timeout=30)
            infer(balancer.url, "http", model, inputs)
    """

    error = LoadBalancerError
    not_started = "haproxy was not started"

    def __init__(self, binary: str | os.PathLike[str] | None = None) -> None:
        super().__init__(Path(binary) if binary is not None else haproxy_binary())
        self.port = 0
        self.config_file: Path | None = None
        self.socket_path: Path | None = None

    def start(
        self,
        directory: str | os.PathLike[str],
        *,
        replica_ports: Sequence[int],
        port: int | None = None,
        health: HealthCheck = HealthCheck(),
        die_with_parent: bool = True,
    ) -> "HAProxy":
        """Write ``directory``/haproxy.cfg, check it (haproxy -c) and launch haproxy.
        With ``die_with_parent`` the kernel sends it SIGTERM when this process ends
        (PR_SET_PDEATHSIG, through setpriv), as TritonServer does.

        Returns:
            self, started (see ``wait_up``).

        Raises:
            LoadBalancerError: already started, a config haproxy refuses, or a
                process that could not be launched.
        """
        if self.process is not None:
            raise LoadBalancerError(f"this haproxy was already started (pid {self.process.pid})")
        directory = Path(directory).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_ports(1)[0]
        # A unix socket path is at most 107 bytes: a short private folder holds it.
        import tempfile

        self.socket_path = Path(tempfile.mkdtemp(prefix="haproxy_")) / "admin.sock"
        self.config_file = directory / "haproxy.cfg"
        self.config_file.write_text(haproxy_config(self.port, replica_ports, self.socket_path, health=health))
        self.log_file = directory / "haproxy.log"
        checked = subprocess.run([str(self.binary), "-c", "-f", str(self.config_file)], capture_output=True,
                                 text=True, timeout=60)
        if checked.returncode != 0:
            raise LoadBalancerError(f"haproxy refused {self.config_file}: {checked.stdout}{checked.stderr}",
                                    kind="config")
        self._launch([str(self.binary), "-db", "-f", str(self.config_file)], die_with_parent=die_with_parent)
        return self

    @property
    def url(self) -> str:
        """host:port of the frontend, as tritonclient.http takes it."""
        return f"{LOOPBACK}:{self.port}"

    def command(self, line: str, timeout: float = 5.0) -> str:
        """One command on the admin socket (e.g. "show stat"), its answer.

        Raises:
            LoadBalancerError: haproxy exited or the socket did not answer.
        """
        if not self.running():
            raise LoadBalancerError(f"haproxy is not running; its log {self.log_file}", kind="exited")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(str(self.socket_path))
                connection.sendall(line.encode() + b"\n")
                chunks = []
                while chunk := connection.recv(65536):
                    chunks.append(chunk)
        except OSError as error:
            raise LoadBalancerError(f"haproxy's admin socket {self.socket_path} did not answer {line!r}: {error}",
                                    kind="socket") from error
        return b"".join(chunks).decode(errors="replace")

    def servers(self) -> dict[str, ServerState]:
        """Each replica's state, by name (replica0, replica1, ...)."""
        text = self.command("show stat").lstrip("# ")
        states = {}
        for row in csv.DictReader(io.StringIO(text)):
            if row.get("pxname") == BACKEND and row.get("svname") not in ("FRONTEND", "BACKEND"):
                states[row["svname"]] = ServerState(
                    row["svname"], row.get("status", ""), int(row.get("scur") or 0), int(row.get("stot") or 0),
                    int(row.get("wretr") or 0), int(row.get("wredis") or 0),
                )
        return states

    def set_state(self, replica: str, state: str) -> None:
        """``ready``, ``drain`` (no new requests; those in flight finish) or ``maint``.

        Raises:
            LoadBalancerError: haproxy refused.
        """
        answer = self.command(f"set server {BACKEND}/{replica} state {state}").strip()
        if answer:
            raise LoadBalancerError(f"haproxy refused to set {replica} to {state}: {answer}", kind="socket")

    def wait_status(self, replica: str, wanted: Sequence[str], timeout: float, interval: float = 0.01) -> float:
        """Poll the admin socket until ``replica``'s status is one of ``wanted``.

        Returns:
            The monotonic time it was first seen so.

        Raises:
            LoadBalancerError: ``timeout`` seconds passed (with its last status).
        """
        deadline = time.monotonic() + timeout
        status = ""
        while True:
            state = self.servers().get(replica)
            status = state.status if state is not None else "missing"
            if status in wanted:
                return time.monotonic()
            if time.monotonic() > deadline:
                raise LoadBalancerError(
                    f"{replica} stayed {status!r} for {timeout:g} s, waiting for {' or '.join(wanted)}; "
                    f"haproxy's log {self.log_file}", kind="timeout")
            time.sleep(interval)

    def wait_up(self, replicas: int, timeout: float = 30.0) -> None:
        """Wait until the admin socket answers and ``replicas`` replicas are UP.

        Raises:
            LoadBalancerError: haproxy exited or ``timeout`` seconds passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise LoadBalancerError(f"haproxy exited (code {self.process.returncode if self.process else None}); "
                                        f"its log {self.log_file}", kind="exited")
            try:
                if sum(state.up for state in self.servers().values()) >= replicas:
                    return
            except LoadBalancerError:
                pass  # the socket is not there yet
            if time.monotonic() > deadline:
                raise LoadBalancerError(f"{replicas} replicas were not UP behind haproxy after {timeout:g} s; "
                                        f"its log {self.log_file}", kind="timeout")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM haproxy's PID, wait up to ``timeout`` seconds, then SIGKILL, and
        remove its admin socket's folder. Safe to call again.

        Returns:
            Its exit code, or None if never started.
        """
        code = super().stop(timeout)
        if self.process is not None and self.socket_path is not None:
            shutil.rmtree(self.socket_path.parent, ignore_errors=True)
        return code
