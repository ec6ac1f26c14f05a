"""A model served while it changes and while a server dies: a new signed version
rolled out under load on one tritonserver, and two replicas behind HAProxy (one
killed and restarted, then the update rolled across both). Every response is checked
bit for bit against the version that could have sent it; each stage returns counts,
switch and detection times and latency percentiles (aoti-deploy fleet prints them)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AotiDeployError
from .haproxy import HAProxy, HealthCheck, replica_name
from .loopback import free_ports
from .triton_client import ServingError, infer, model_states
from .triton_config import TensorNames
from .triton_server import TritonServer

if TYPE_CHECKING:
    import torch

OLD, NEW = 1, 2  # the repository versions of the two weight seeds
OTHER_BITS = -1  # an answer with the bits of neither version
FAILED = 0
MODEL_NAME = "mlp"
INPUT_SHAPE = (4, 16)  # SeededMLP's [batch, features]


class CompiledVersion(Protocol):
    """A compiled and verified package, loaded in this process (aoti_deploy.api's Package)."""

    path: Path

    def run(self, inputs: list["torch.Tensor"]) -> list["torch.Tensor"]: ...

    def close(self) -> None: ...


class Export(Protocol):
    """How a version is compiled: ``aoti_deploy.api.export``, passed in by the caller
    (the API sits above serving, so this module does not import it)."""

    def __call__(self, model: "torch.nn.Module", args: Any, *, package_path: Path) -> CompiledVersion: ...


# --- The model: one package per version, compiled once -------------------------------


@dataclass(frozen=True)
class FleetModel:
    """Two versions of one model (same inputs and outputs, other weights), the request
    sets the load sends, and each version's outputs for each set, computed beforehand
    with the Python runtime on the same package."""

    name: str
    packages: tuple[Path, Path]  # version OLD, version NEW
    inputs: tuple[tuple["torch.Tensor", ...], ...]
    expected: dict[int, tuple[tuple["torch.Tensor", ...], ...]]  # version -> outputs per request set
    names: TensorNames
    sign_key: Path  # EC private key (PEM) the bundles are signed with
    trusted_key: Path  # its public half, which the backend verifies them with

    def version_of(self, request: int, outputs: Sequence["torch.Tensor"]) -> int:
        """OLD or NEW when ``outputs`` have exactly that version's bits for request
        set ``request`` (compared as same-width integers), else OTHER_BITS."""
        import torch

        from ..verify.bits import bit_view

        for version, per_request in self.expected.items():
            wanted = per_request[request]
            if len(outputs) == len(wanted) and all(
                a.dtype == b.dtype and a.shape == b.shape and torch.equal(bit_view(a), bit_view(b))
                for a, b in zip(outputs, wanted)
            ):
                return version
        return OTHER_BITS


def make_signing_keys(directory: str | os.PathLike[str]) -> tuple[Path, Path]:
    """An EC P-256 key pair made with openssl: (private PEM, public PEM).

    Raises:
        AotiDeployError: openssl failed or is missing.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    private, public = directory / "fleet_signing.pem", directory / "fleet_signing.pub"
    for command in (["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(private)],
                    ["openssl", "ec", "-in", str(private), "-pubout", "-out", str(public)]):
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except OSError as error:
            raise AotiDeployError(f"could not run openssl: {error}") from error
        if result.returncode != 0:
            raise AotiDeployError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    return private, public


def prepare_model(
    work: str | os.PathLike[str],
    export: Export,
    *,
    seeds: tuple[int, int] = (1, 2),
    request_sets: int = 4,
    on_stage: Callable[[str], None] | None = None,
) -> FleetModel:
    """Compile SeededMLP with each seed into ``work``/packages with ``export``
    (``aoti_deploy.api.export``; a package built from the same inputs is reused), make
    a signing key pair, and compute both versions' outputs for ``request_sets`` seeded
    inputs with the Python runtime.

    Raises:
        AotiDeployError: a compile or verification failed, or the two versions give
            the same bits for some request (the check could not tell them apart).
    """
    import torch

    from ..models.mlp import SeededMLP
    from ..package.archive import read_package_spec

    work = Path(work)
    inputs = tuple(
        (torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(100 + i)),) for i in range(request_sets)
    )
    packages, expected = [], {}
    for version, seed in zip((OLD, NEW), seeds):
        if on_stage is not None:
            on_stage(f"compiling version {version} (weights from seed {seed})")
        package = export(SeededMLP(seed), inputs[0], package_path=work / "packages" / f"mlp_seed{seed}.pt2")
        packages.append(package.path)
        expected[version] = tuple(tuple(package.run(list(x))) for x in inputs)
        package.close()
    model = FleetModel(MODEL_NAME, (packages[0], packages[1]), inputs, expected,
                       TensorNames.of_spec(read_package_spec(packages[0])), *make_signing_keys(work / "keys"))
    for i in range(request_sets):
        if model.version_of(i, expected[NEW][i]) != NEW:
            raise AotiDeployError(f"seeds {seeds} give the same outputs for request set {i}; pick other seeds")
    return model


def publish(model: FleetModel, repository: str | os.PathLike[str], version: int,
            version_policy: str | None = None) -> None:
    """Publish ``version`` (OLD or NEW) of the model into ``repository``, signed, with
    the trusted key in its config: write_repository's atomic publish."""
    from .triton_repository import write_repository

    write_repository(model.packages[version - 1], repository, name=model.name, version=version,
                     sign_key=model.sign_key, trusted_key=model.trusted_key, version_policy=version_policy)


# --- Load: clients that send without pause, and what each response was ---------------


@dataclass(frozen=True)
class Response:
    client: int
    sent: float  # time.monotonic() when the request was sent
    received: float  # ... when it was answered or failed
    version: int  # OLD or NEW (its bits), OTHER_BITS, or FAILED
    error: str = ""

    @property
    def latency_ms(self) -> float:
        return (self.received - self.sent) * 1000.0


class LoadGenerator:
    """``clients`` threads, each with its own tritonclient HTTP connection to ``url``,
    sending the model's request sets in turn without pause until ``stop``. A failed
    request is counted, never raised."""

    def __init__(self, url: str, model: FleetModel, clients: int = 8) -> None:
        self.url = url.removeprefix("http://")
        self.model = model
        self.clients = clients
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: list[list[Response]] = [[] for _ in range(clients)]

    def start(self) -> "LoadGenerator":
        self._threads = [threading.Thread(target=self._client, args=(c,), daemon=True) for c in range(self.clients)]
        for thread in self._threads:
            thread.start()
        return self

    def _client(self, index: int) -> None:
        import tritonclient.http as httpclient

        model = self.model
        connection = httpclient.InferenceServerClient(self.url, connection_timeout=10.0, network_timeout=60.0)
        responses = self._responses[index]
        count = index
        try:
            while not self._stop.is_set():
                request = count % len(model.inputs)
                count += 1
                sent = time.monotonic()
                try:
                    outputs = infer(connection, "http", model.name, list(model.inputs[request]), model.names)
                except Exception as error:  # counted: every kind of failure is a failed request
                    responses.append(Response(index, sent, time.monotonic(), FAILED, str(error)[:300]))
                    time.sleep(0.01)
                    continue
                responses.append(Response(index, sent, time.monotonic(), model.version_of(request, outputs)))
        finally:
            connection.close()

    def stop(self, timeout: float = 120.0) -> list[Response]:
        """Stop the clients (each finishes its request) and return every response, in
        the order they were sent.

        Raises:
            ServingError: a client did not finish within ``timeout`` seconds.
        """
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        if any(thread.is_alive() for thread in self._threads):
            raise ServingError(f"a load client did not finish within {timeout:g} s")
        return sorted((r for responses in self._responses for r in responses), key=lambda r: r.sent)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (fraction 0.99: p99); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * len(ordered) + 0.5)) - 1))]


def p99_ms(responses: Sequence[Response], start: float, end: float) -> float | None:
    """p99 latency of the answered requests sent in [start, end)."""
    return percentile([r.latency_ms for r in responses if r.version != FAILED and start <= r.sent < end], 0.99)


# --- Results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario's counts and times. Times are seconds from its event (publish or
    SIGKILL); p99s are milliseconds."""

    scenario: str
    requests: int
    failed: int
    old: int  # answers with the old version's bits
    new: int  # ... the new version's
    other_bits: int  # answered with the bits of neither version
    stale: int  # old bits to a request sent after the switch was complete
    p99_steady_ms: float | None
    p99_event_ms: float | None  # during the switch, or from SIGKILL to back in rotation
    first_new_s: float | None = None  # publish -> first response with the new bits
    last_old_s: float | None = None  # publish -> last response with the old bits
    detect_s: float | None = None  # SIGKILL -> the balancer marks the replica DOWN
    ready_s: float | None = None  # restart -> the replica's /v2/health/ready answers 200
    return_s: float | None = None  # restart -> the balancer marks it UP again
    retries: int | None = None  # requests the balancer re-sent (HAProxy's wretr + wredis)
    errors: tuple[str, ...] = ()  # the first few failures
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.failed == 0 and self.other_bits == 0 and self.stale == 0 and self.requests > 0


def _result(scenario: str, responses: list[Response], steady: tuple[float, float], event: tuple[float, float],
            *, published: float | None = None, switched: float | None = None, **times: object) -> ScenarioResult:
    failures = [r for r in responses if r.version == FAILED]
    old = [r for r in responses if r.version == OLD]
    new = [r for r in responses if r.version == NEW]
    first_new = min((r.received for r in new), default=None)
    last_old = max((r.received for r in old), default=None)
    stale = 0
    if switched is not None:
        stale = sum(1 for r in old if r.sent > switched)
    return ScenarioResult(
        scenario=scenario,
        requests=len(responses),
        failed=len(failures),
        old=len(old),
        new=len(new),
        other_bits=sum(1 for r in responses if r.version == OTHER_BITS),
        stale=stale,
        p99_steady_ms=p99_ms(responses, *steady),
        p99_event_ms=p99_ms(responses, *event),
        first_new_s=None if published is None or first_new is None else first_new - published,
        last_old_s=None if published is None or last_old is None else last_old - published,
        errors=tuple(dict.fromkeys(r.error for r in failures))[:5],
        **times,  # type: ignore[arg-type]
    )


def wait_for_version(http_url: str, model: str, version: int, timeout: float = 120.0) -> float:
    """Poll the server's repository index until ``version`` of ``model`` is READY and
    no other version is.

    Returns:
        The monotonic time it was first seen so.

    Raises:
        ServingError: a version failed to load (Triton's reason), or ``timeout`` passed.
    """
    deadline = time.monotonic() + timeout
    while True:
        states = [s for s in model_states(http_url) if s.name == model]
        for state in states:
            if state.version == str(version) and state.state == "UNAVAILABLE" and state.reason:
                raise ServingError(f"version {version} of {model} did not load: {state.reason}", kind="model_unavailable")
        ready = {s.version for s in states if s.state == "READY"}
        if ready == {str(version)}:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise ServingError(f"version {version} of {model} was not the only ready one after {timeout:g} s: "
                               f"{[(s.version, s.state, s.reason) for s in states]}", kind="timeout")
        time.sleep(0.02)


@dataclass(frozen=True)
class Timing:
    """How long each phase of a scenario lasts, in seconds."""

    steady_s: float = 3.0  # load before the event, the steady-state baseline
    down_s: float = 1.0  # a killed replica stays down this long before its restart
    settle_s: float = 2.0  # load after the event has completed
    timeout_s: float = 120.0  # for any one wait (a load, a health state)


# --- Scenario 1: a rolling update on one server ----------------------------------------


def _check_control(control: str) -> None:
    if control not in ("poll", "explicit"):
        raise AotiDeployError(f"control must be poll or explicit, got {control!r}", kind="usage")


def rolling_update_one_server(
    model: FleetModel,
    work: str | os.PathLike[str],
    backend_dir: str | os.PathLike[str],
    *,
    control: str = "poll",
    version_policy: str | None = None,
    clients: int = 8,
    timing: Timing = Timing(),
) -> ScenarioResult:
    """One tritonserver serves version OLD under load from ``clients`` clients; version
    NEW is published into its repository; the server loads it and unloads OLD.

    Args:
        control: "poll" (the server finds the new version itself,
            --repository-poll-secs=1) or "explicit" (POST
            /v2/repository/models/NAME/load after publishing).
        version_policy: the config's version_policy (None: Triton's default, the latest).

    Raises:
        ServingError, AotiDeployError: the server or a version did not load.
    """
    _check_control(control)
    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    repository = work / "repository"
    publish(model, repository, OLD, version_policy)
    args = ["--model-control-mode=poll", "--repository-poll-secs=1"] if control == "poll" else [
        "--model-control-mode=explicit", f"--load-model={model.name}"]
    with TritonServer().start(repository, backend_dir=backend_dir, log_file=work / "tritonserver.log",
                              extra_args=args) as server:
        server.wait_ready(timing.timeout_s, models=[model.name])
        load = LoadGenerator(server.http_url, model, clients).start()
        started = time.monotonic()
        try:
            time.sleep(timing.steady_s)
            publish(model, repository, NEW, version_policy)
            published = time.monotonic()
            if control == "explicit":
                server.load_model(model.name)
            unloaded = wait_for_version(server.http_url, model.name, NEW, timing.timeout_s)
            time.sleep(timing.settle_s)
        finally:
            responses = load.stop()
    new_seen = min((r.received for r in responses if r.version == NEW), default=unloaded)
    old_seen = max((r.received for r in responses if r.version == OLD), default=published)
    return _result(f"rolling update, one server ({control})", responses, (started + 0.5, published),
                   (published, max(new_seen, old_seen, unloaded)), published=published, switched=new_seen)


# --- Two replicas behind HAProxy --------------------------------------------------------


class ReplicaSet:
    """``replicas`` tritonservers on one repository (explicit model control, every
    model loaded at start), each on ports picked once so a restart comes back where
    the balancer looks, and HAProxy in front. Stop it (or use ``with``)."""

    def __init__(self, repository: str | os.PathLike[str], backend_dir: str | os.PathLike[str],
                 work: str | os.PathLike[str], replicas: int = 2, health: HealthCheck = HealthCheck()) -> None:
        self.repository = Path(repository)
        self.backend_dir = Path(backend_dir)
        self.work = Path(work)
        self.health = health
        ports = free_ports(3 * replicas)
        self.ports = [tuple(ports[3 * i:3 * i + 3]) for i in range(replicas)]
        self.servers: list[TritonServer] = []
        self.balancer = HAProxy()

    def _start_replica(self, index: int) -> TritonServer:
        http, grpc, metrics = self.ports[index]
        return TritonServer().start(
            self.repository, backend_dir=self.backend_dir, http_port=http, grpc_port=grpc, metrics_port=metrics,
            log_file=self.work / f"{replica_name(index)}.log", model_control_explicit=True,
            extra_args=["--load-model=*"])

    def start(self, timeout: float = 120.0) -> "ReplicaSet":
        """Start every replica, wait until each is ready, then start HAProxy and wait
        until it has every replica UP."""
        try:
            self.servers = [self._start_replica(i) for i in range(len(self.ports))]
            for server in self.servers:
                server.wait_ready(timeout)
                _wait_server_ready(server, timeout)
            self.balancer.start(self.work / "haproxy", replica_ports=[p[0] for p in self.ports], health=self.health)
            self.balancer.wait_up(len(self.ports), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, index: int) -> float:
        """SIGKILL replica ``index`` by its PID. Returns the monotonic time of the kill."""
        server = self.servers[index]
        killed = time.monotonic()
        server.process.kill()  # type: ignore[union-attr]
        server.process.wait()  # type: ignore[union-attr]
        server.stop()  # closes its log
        return killed

    def restart(self, index: int) -> float:
        """Start replica ``index`` again on its ports. Returns the monotonic time of the start."""
        started = time.monotonic()
        self.servers[index] = self._start_replica(index)
        return started

    def stop(self) -> None:
        self.balancer.stop()
        for server in self.servers:
            server.stop()

    def __enter__(self) -> "ReplicaSet":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _wait_server_ready(server: TritonServer, timeout: float) -> float:
    """Poll GET /v2/health/ready (what the balancer checks) until 200."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        if not server.running():
            raise ServingError(f"tritonserver exited; its log {server.log_file}:\n{server.log_tail()}", kind="exited")
        try:
            with urllib.request.urlopen(f"{server.http_url}/v2/health/ready", timeout=1.0) as answer:
                if answer.status == 200:
                    return time.monotonic()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise ServingError(f"{server.http_url} was not ready after {timeout:g} s", kind="timeout")
        time.sleep(0.01)


def _balancer_retries(replicas: ReplicaSet) -> int:
    return sum(state.retries + state.redispatches for state in replicas.balancer.servers().values())


def replica_kill_and_restart(
    model: FleetModel, replicas: ReplicaSet, *, victim: int = 0, clients: int = 8, timing: Timing = Timing()
) -> ScenarioResult:
    """Load through HAProxy; replica ``victim`` gets SIGKILL, stays down
    ``timing.down_s``, and is started again; the balancer takes it out and back.

    Raises:
        LoadBalancerError, ServingError: a state was not reached in time.
    """
    balancer = replicas.balancer
    name = replica_name(victim)
    retries_before = _balancer_retries(replicas)
    load = LoadGenerator(balancer.url, model, clients).start()
    started = time.monotonic()
    try:
        time.sleep(timing.steady_s)
        killed = replicas.kill(victim)
        detected = balancer.wait_status(name, ["DOWN"], timing.timeout_s)
        time.sleep(timing.down_s)
        restarted = replicas.restart(victim)
        ready = _wait_server_ready(replicas.servers[victim], timing.timeout_s)
        back = balancer.wait_status(name, ["UP"], timing.timeout_s)
        time.sleep(timing.settle_s)
    finally:
        responses = load.stop()
    return _result(
        "replica SIGKILL and restart", responses, (started + 0.5, killed), (killed, back),
        detect_s=detected - killed, ready_s=ready - restarted, return_s=back - restarted,
        retries=_balancer_retries(replicas) - retries_before,
    )


def rolling_update_replicas(
    model: FleetModel, replicas: ReplicaSet, *, clients: int = 8, timing: Timing = Timing()
) -> ScenarioResult:
    """Load through HAProxy; version NEW is published into the replicas' repository,
    then each replica in turn is drained (no new requests; those in flight finish),
    loads NEW (unloading OLD), and is put back into rotation.

    Raises:
        LoadBalancerError, ServingError: a state was not reached in time.
    """
    balancer = replicas.balancer
    retries_before = _balancer_retries(replicas)
    load = LoadGenerator(balancer.url, model, clients).start()
    started = time.monotonic()
    try:
        time.sleep(timing.steady_s)
        publish(model, replicas.repository, NEW)
        published = time.monotonic()
        for index, server in enumerate(replicas.servers):
            name = replica_name(index)
            balancer.set_state(name, "drain")
            deadline = time.monotonic() + timing.timeout_s
            while balancer.servers()[name].sessions > 0:
                if time.monotonic() > deadline:
                    raise ServingError(f"{name} still had sessions {timing.timeout_s:g} s after its drain")
                time.sleep(0.01)
            server.load_model(model.name)
            wait_for_version(server.http_url, model.name, NEW, timing.timeout_s)
            balancer.set_state(name, "ready")
            balancer.wait_status(name, ["UP"], timing.timeout_s)
        switched = time.monotonic()
        time.sleep(timing.settle_s)
    finally:
        responses = load.stop()
    return _result(
        "rolling update, two replicas", responses, (started + 0.5, published), (published, switched),
        published=published, switched=switched, retries=_balancer_retries(replicas) - retries_before,
    )


# --- All three ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetReport:
    results: list[ScenarioResult] = field(default_factory=list)
    work: Path | None = None

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(result.passed for result in self.results)


def run_fleet(
    work: str | os.PathLike[str],
    backend_dir: str | os.PathLike[str],
    *,
    clients: int = 8,
    control: str = "poll",
    timing: Timing = Timing(),
    on_stage: Callable[[str], None] | None = None,
    model: FleetModel | None = None,
    export: Export | None = None,
) -> FleetReport:
    """Prepare the two versions with ``export`` (``aoti_deploy.api.export``; unless
    ``model`` is given), then run the three scenarios in turn: a rolling update on one
    server, a replica SIGKILL and restart behind HAProxy, and the rolling update across
    both replicas.

    Raises:
        AotiDeployError (kind usage): neither ``model`` nor ``export`` was given.
        AotiDeployError (its subclasses ServingError, LoadBalancerError,
        HAProxyUnavailableError, TritonUnavailableError): a stage could not run.
    """
    from .haproxy import haproxy_binary

    def stage(text: str) -> None:
        if on_stage is not None:
            on_stage(text)

    work = Path(work)
    if model is None and export is None:
        raise AotiDeployError("run_fleet needs a prepared model, or export to prepare one", kind="usage")
    _check_control(control)  # before minutes of compiling
    haproxy_binary()
    if model is None:
        model = prepare_model(work, export, on_stage=on_stage)
    results = []
    stage("rolling update on one server")
    results.append(rolling_update_one_server(model, work / "one_server", backend_dir, control=control,
                                             clients=clients, timing=timing))
    stage("two replicas behind HAProxy")
    fleet_dir = work / "replicas"
    shutil.rmtree(fleet_dir, ignore_errors=True)
    publish(model, fleet_dir / "repository", OLD)
    with ReplicaSet(fleet_dir / "repository", backend_dir, fleet_dir).start(timing.timeout_s) as replicas:
        stage("replica SIGKILL and restart")
        results.append(replica_kill_and_restart(model, replicas, clients=clients, timing=timing))
        stage("rolling update across the two replicas")
        results.append(rolling_update_replicas(model, replicas, clients=clients, timing=timing))
    return FleetReport(results, work)
