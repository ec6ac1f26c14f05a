"""The Triton section of the benchmark: the demo package served by this project's aoti
backend in one tritonserver, against the in-process C++ runner measured in the same run.
Client latency over HTTP and gRPC, the server's own time per request by phase (from its
statistics), and throughput from 1 to 16 gRPC clients with and without dynamic batching.
Stage functions only: triton_report.py makes its tables and targets, ``aoti-deploy
bench`` prints them."""

from __future__ import annotations

import math
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import AotiDeployError, VerificationError
from ..runtime.tensor_files import save_tensors
from ..verify.bits import bit_view
from .results import Latency
from .timing import run_cpp_bench

# The three models of the section's repository.
DEMO_MODEL = "demo"  # the static package, max_batch_size 0
BATCHING_MODEL = "demo_batching"  # the dynamic-batch package, dynamic batching on
NOBATCHING_MODEL = "demo_nobatching"  # the same package, one request per execution
# The dynamic-batch package's dim 0 range; it is also the models' max_batch_size.
MAX_BATCH = 16
# How long the dynamic batcher waits for more requests to fill a batch.
MAX_QUEUE_DELAY_US = 500
# Concurrent gRPC clients of the throughput runs; the scaling ratio is last / first.
CLIENTS = (1, 4, 16)
# The server's per-request phases (inference_stats of /v2/models/<model>/stats), in order.
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")
TOTAL = "total"  # the four phases of one request, added
# How long to wait for a request's statistics: the backend reports them right after it
# sends the response, so the client may see the response first.
_STATS_WAIT_S = 2.0


@dataclass
class InProcessReference:
    """The in-process C++ runner on the demo package, measured in the same run."""

    latency: Latency  # aoti_runner --bench
    source: str  # where the number came from
    intra_op_threads: int  # the runner's (it times 1 against cores / serving threads)


@dataclass
class ThroughputRun:
    """``clients`` concurrent gRPC clients (one thread and one connection each) sending
    batch-1 requests back to back to ``model`` for a fixed time."""

    model: str
    clients: int
    requests: int  # completed in the timed window, all clients
    seconds: float  # from the common start to the last completion
    inferences: int  # the model's inference_count over the window
    executions: int  # the model's execution_count over the window: a batch Triton formed counts 1

    @property
    def throughput(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds

    @property
    def per_execution(self) -> float:
        """Requests merged into one execution, on average."""
        return self.inferences / self.executions if self.executions else math.nan


@dataclass
class TritonBench:
    """The section's numbers; every ratio is to ``in_process.latency.p50``."""

    shape: tuple[int, ...]  # the demo model's input
    in_process: InProcessReference
    http: Latency  # client side, one client, batch 1, on DEMO_MODEL
    grpc: Latency
    phases: dict[str, Latency]  # server side, per request: PHASES and TOTAL
    throughput: list[ThroughputRun]
    max_batch_size: int
    max_queue_delay_us: int
    outputs_checked: int  # responses compared bit for bit with their inputs
    server_intra_op_threads: int  # the backend's, per instance (from the server's log; 0: not found)
    log_file: str = ""

    def ratio(self, latency: Latency) -> float:
        return latency.p50 / self.in_process.latency.p50

    def run(self, model: str, clients: int) -> ThroughputRun | None:
        return next((r for r in self.throughput if r.model == model and r.clients == clients), None)

    def scaling(self, model: str) -> float:
        """Throughput at the most clients over throughput at the fewest."""
        runs = sorted((r for r in self.throughput if r.model == model), key=lambda r: r.clients)
        return runs[-1].throughput / runs[0].throughput if len(runs) > 1 else math.nan

    def ratios(self) -> dict[str, float]:
        """The ratios the tables show, by name (for the JSON)."""
        found = {"http_p50": self.ratio(self.http), "grpc_p50": self.ratio(self.grpc)}
        found.update({f"server_{phase}_p50": self.ratio(self.phases[phase]) for phase in (*PHASES, TOTAL)})
        models = dict.fromkeys(r.model for r in self.throughput)
        found.update({f"throughput_scaling_{model}": self.scaling(model) for model in models})
        return found


def resolve_backend_dir(runner: Path | None = None) -> Path:
    """The ``--backend-directory`` holding this project's backend: ``backends/`` beside
    the runner (the same build), else the build folder's (``locate.triton_backend_dir``).

    Raises:
        AotiDeployError: the backend is not built in either place.
    """
    from ..locate import TRITON_BACKEND_LIBRARY, TRITON_BACKEND_NAME, triton_backend_dir

    if runner is not None:
        beside = Path(runner).resolve().parent / "backends"
        if (beside / TRITON_BACKEND_NAME / TRITON_BACKEND_LIBRARY).is_file():
            return beside
    return triton_backend_dir()


def triton_unavailable_reason(runner: Path | None = None) -> str | None:
    """Why the section cannot run here (the triton extra is missing, or the backend is
    not built), or None when it can."""
    from ..serve.triton_install import require_triton_client, tritonserver_binary

    try:
        tritonserver_binary()
        require_triton_client()
        resolve_backend_dir(runner)
    except AotiDeployError as error:
        return str(error)
    return None


def _check_bits(outputs: Sequence[torch.Tensor], x: torch.Tensor, what: str) -> None:
    """The identity model's one output must hold the input's bits.

    Raises:
        VerificationError: it does not; timing a wrong answer would be meaningless.
    """
    if len(outputs) != 1:
        raise VerificationError(f"{what}: the server returned {len(outputs)} outputs, the identity model has 1")
    (output,) = outputs
    if output.dtype != x.dtype or output.shape != x.shape:
        raise VerificationError(f"{what}: the output is {output.dtype} {list(output.shape)}, the input "
                                f"{x.dtype} {list(x.shape)}")
    if not torch.equal(bit_view(output), bit_view(x)):
        raise VerificationError(f"{what}: the output's bits differ from the input's, so it is not timed")


def _client(protocol: str, server: Any) -> Any:
    """One tritonclient connection, reused for every request of a run."""
    if protocol == "http":
        import tritonclient.http as client_module

        return client_module.InferenceServerClient(server.http_url.removeprefix("http://"))
    import tritonclient.grpc as client_module

    return client_module.InferenceServerClient(server.grpc_url)


def _client_latency(server: Any, protocol: str, model: str, x: torch.Tensor, requests: int, warmup: int) -> Latency:
    """Sequential requests over one connection, each timed from the call to the
    outputs as tensors; the first, middle and last responses are checked bit for bit."""
    from ..serve.triton_client import infer, model_tensor_names

    names = model_tensor_names(server.http_url, model)  # asked once, not in each timed request
    client = _client(protocol, server)
    try:
        for _ in range(warmup):
            _check_bits(infer(client, protocol, model, [x], names), x, f"{protocol} warm-up on {model}")
        samples, kept = [], {}
        checked = {0, requests // 2, requests - 1}
        for i in range(requests):
            start = time.perf_counter_ns()
            outputs = infer(client, protocol, model, [x], names)
            samples.append((time.perf_counter_ns() - start) / 1e3)
            if i in checked:
                kept[i] = outputs
        for i, outputs in kept.items():
            _check_bits(outputs, x, f"{protocol} request {i} on {model}")
        return Latency.of(samples)
    finally:
        client.close()


def _phase_totals(stats_client: Any, model: str) -> dict[str, tuple[int, int]]:
    """(count, ns) of ``success`` and each phase, summed over the model's versions."""
    stats = stats_client.get_inference_statistics(model_name=model)
    totals = {name: (0, 0) for name in ("success", *PHASES)}
    for version in stats.get("model_stats", []):
        inference = version.get("inference_stats", {})
        for name in totals:
            entry = inference.get(name, {})
            count, ns = totals[name]
            totals[name] = (count + int(entry.get("count", 0)), ns + int(entry.get("ns", 0)))
    return totals


def _server_phases(server: Any, model: str, x: torch.Tensor, requests: int, warmup: int) -> dict[str, Latency]:
    """Per-request server time by phase: one sequential gRPC client, the model's
    statistics read after each response (so the read never overlaps a request), and
    each request's share taken as the difference from the previous read."""
    import tritonclient.http as http_module

    from ..serve.triton_client import ServingError, infer, model_tensor_names

    names = model_tensor_names(server.http_url, model)
    client = _client("grpc", server)
    stats_client = http_module.InferenceServerClient(server.http_url.removeprefix("http://"))
    try:
        for _ in range(warmup):
            _check_bits(infer(client, "grpc", model, [x], names), x, f"grpc warm-up on {model}")
        before = _phase_totals(stats_client, model)
        samples: dict[str, list[float]] = {phase: [] for phase in (*PHASES, TOTAL)}
        for i in range(requests):
            outputs = infer(client, "grpc", model, [x], names)
            if i == 0:
                _check_bits(outputs, x, f"grpc statistics run on {model}")
            deadline = time.monotonic() + _STATS_WAIT_S
            while True:
                after = _phase_totals(stats_client, model)
                if all(after[name][0] > before[name][0] for name in after):
                    break
                if time.monotonic() > deadline:
                    raise ServingError(f"model {model}'s statistics did not count request {i} within "
                                       f"{_STATS_WAIT_S:g} s of its response")
            counts = {after[name][0] - before[name][0] for name in after}
            if counts != {1}:
                raise ServingError(f"model {model}'s statistics counted {sorted(counts)} requests for request {i}; "
                                   "is another client using the server?")
            deltas = {phase: (after[phase][1] - before[phase][1]) / 1e3 for phase in PHASES}
            for phase, microseconds in deltas.items():
                samples[phase].append(microseconds)
            samples[TOTAL].append(sum(deltas.values()))
            before = after
        return {phase: Latency.of(values) for phase, values in samples.items()}
    finally:
        client.close()
        stats_client.close()


def _throughput_run(server: Any, model: str, x: torch.Tensor, clients: int, seconds: float) -> ThroughputRun:
    """``clients`` threads, each with its own gRPC connection and one warm-up request,
    start together and send requests back to back for ``seconds``; each checks its
    first and last response bit for bit. The model's statistics are read before the
    start and after the last thread ends."""
    from ..serve.triton_client import infer, model_statistics, model_tensor_names

    names = model_tensor_names(server.http_url, model)
    ready = threading.Barrier(clients + 1)
    go = threading.Event()
    start_at: list[float] = []
    counts = [0] * clients
    last_done = [0.0] * clients
    errors: list[BaseException] = []

    def client_thread(index: int) -> None:
        client = None
        try:
            client = _client("grpc", server)
            _check_bits(infer(client, "grpc", model, [x], names), x, f"grpc warm-up on {model}")
        except BaseException as error:  # reported by the main thread, after the barrier
            errors.append(error)
        try:
            ready.wait()
            go.wait()
            if errors or client is None or not start_at:
                return
            deadline = start_at[0] + seconds
            outputs = None
            while True:
                outputs = infer(client, "grpc", model, [x], names)
                counts[index] += 1
                last_done[index] = time.perf_counter()
                if counts[index] == 1:
                    _check_bits(outputs, x, f"{clients} clients on {model}, client {index}'s first request")
                if last_done[index] >= deadline:
                    break
            _check_bits(outputs, x, f"{clients} clients on {model}, client {index}'s last request")
        except BaseException as error:
            errors.append(error)
        finally:
            if client is not None:
                client.close()

    threads = [threading.Thread(target=client_thread, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    try:
        before = model_statistics(server.http_url, model)
        start_at.append(time.perf_counter())
    finally:
        go.set()  # without a start time, the threads end at once
    from ..serve.triton_client import INFER_TIMEOUT_S, ServingError

    for thread in threads:
        thread.join(timeout=seconds + 2 * INFER_TIMEOUT_S)  # each request times out on its own
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise ServingError(f"{clients} clients on {model}: a client thread did not finish")
    after = model_statistics(server.http_url, model)
    return ThroughputRun(model, clients, sum(counts), max(last_done) - start_at[0],
                         after.inference_count - before.inference_count, after.execution_count - before.execution_count)


def _identity_input(package: Path, batch: int | None = None) -> torch.Tensor:
    """A seeded random input at the package's example shape (dim 0 set to ``batch``).

    Raises:
        AotiDeployError: the package is not an identity with one input, so its
            outputs could not be checked against its inputs.
    """
    from ..package.archive import read_package_spec
    from ..package.dtypes import dtype_from_name

    spec = read_package_spec(package)
    if not spec.is_identity or len(spec.inputs) != 1 or not spec.example_shapes:
        raise AotiDeployError(f"{package}: the Triton section serves an identity model with one input, whose "
                                "outputs it checks against its inputs; this package is not one")
    shape = tuple(spec.example_shapes[0])
    if batch is not None:
        shape = (batch, *shape[1:])
    dtype = dtype_from_name(spec.inputs[0].dtype)
    return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)


def write_bench_repository(repository: Path, package: Path, dynamic_package: Path, op_library: Path) -> None:
    """DEMO_MODEL from ``package`` (max_batch_size 0), and BATCHING_MODEL and
    NOBATCHING_MODEL from ``dynamic_package`` (dim 0 dynamic from 1), with and without
    dynamic batching. An existing ``repository`` is replaced.

    Raises:
        AotiDeployError: the dynamic package is not batchable from 1; write_repository's errors.
    """
    from ..serve.triton_repository import write_repository

    shutil.rmtree(repository, ignore_errors=True)
    write_repository(package, repository, name=DEMO_MODEL, op_libraries=[op_library])
    for name, batching in ((BATCHING_MODEL, True), (NOBATCHING_MODEL, False)):
        written = write_repository(dynamic_package, repository, name=name, op_libraries=[op_library],
                                   dynamic_batching=batching, max_queue_delay_us=MAX_QUEUE_DELAY_US)
        if not written.batchable or written.warnings:
            raise AotiDeployError(f"{dynamic_package} is not batchable from 1 ({written.config.batching}; "
                                    f"{'; '.join(written.warnings)}): export it with a dynamic batch from 1")


def measure_triton(
    work_dir: Path,
    package: Path,
    dynamic_package: Path,
    op_library: Path,
    backend_dir: Path,
    runner: Path,
    *,
    requests: int,
    seconds: float,
    clients: Sequence[int] = CLIENTS,
    in_process: InProcessReference | None = None,
    on_step: Callable[[str], None] | None = None,
) -> TritonBench:
    """Serve ``package`` and ``dynamic_package`` from one tritonserver and measure them.

    Args:
        work_dir: the repository, the server's log and the runner's files go here.
        package: the static identity package (the demo model).
        dynamic_package: the same model with dim 0 dynamic from 1 (up to MAX_BATCH).
        op_library: the op library each bundle carries.
        backend_dir: tritonserver's --backend-directory (``resolve_backend_dir``).
        runner: aoti_runner, for the in-process reference when ``in_process`` is None.
        requests: timed requests per client-latency run and per statistics run (a
            tenth as many warm-up requests first).
        seconds: length of each throughput run.
        clients: the concurrent clients of the throughput runs, fewest first.
        in_process: aoti_runner --bench on ``package`` from this run, if measured;
            else it is measured here.

    Returns:
        The TritonBench; nothing is printed.

    Raises:
        TritonUnavailableError, ServingError: no server, or it failed.
        VerificationError: a response's bits differ from its input's.
        AotiDeployError: the packages are not identities, or the runner failed.
    """
    from ..serve.triton_server import TritonServer

    step = on_step or (lambda name: None)
    if requests < 1 or seconds <= 0 or not clients or min(clients) < 1:
        raise AotiDeployError(f"Triton section: requests ({requests}), seconds ({seconds:g}) and clients "
                                f"({list(clients)}) must be positive")
    work_dir.mkdir(parents=True, exist_ok=True)
    x = _identity_input(package)
    single = _identity_input(dynamic_package, batch=1)
    warmup = max(1, requests // 10)
    if in_process is None:
        step("Triton: in-process reference, aoti_runner --bench")
        inputs = save_tensors(work_dir / "triton_input.pt", [x])
        iterations = max(20, requests)
        cpp = run_cpp_bench(runner, package, op_library, inputs, iterations, max(1, iterations // 10))
        in_process = InProcessReference(
            Latency(cpp["p50_us"], cpp["p90_us"], cpp["p99_us"], int(cpp["outputs_checked"])),
            f"aoti_runner --bench, {iterations} runs, measured for this section", int(cpp["intra_op_threads"]))

    step("Triton: write the repository, start tritonserver, client latency over HTTP and gRPC")
    repository = work_dir / "triton_repository"
    write_bench_repository(repository, package, dynamic_package, op_library)
    log_file = work_dir / "tritonserver.log"
    log_file.unlink(missing_ok=True)
    server = TritonServer().start(repository, backend_dir=backend_dir, log_file=log_file)
    try:
        server.wait_ready(120, models=[DEMO_MODEL, BATCHING_MODEL, NOBATCHING_MODEL])
        http = _client_latency(server, "http", DEMO_MODEL, x, requests, warmup)
        grpc = _client_latency(server, "grpc", DEMO_MODEL, x, requests, warmup)
        step("Triton: server time per request by phase, from its statistics")
        phases = _server_phases(server, DEMO_MODEL, x, requests, warmup)
        step(f"Triton: throughput from {', '.join(map(str, clients))} gRPC clients, with and without batching")
        runs = [_throughput_run(server, model, single, n, seconds)
                for model in (BATCHING_MODEL, NOBATCHING_MODEL) for n in sorted(clients)]
    finally:
        server.stop()
    # Per client-latency run: the warm-up and the first, middle and last; per statistics
    # run: the warm-up and the first; per throughput client: its warm-up, first and last.
    checked = 2 * (warmup + len({0, requests // 2, requests - 1})) + warmup + 1 + sum(3 * r.clients for r in runs)
    return TritonBench(tuple(x.shape), in_process, http, grpc, phases, runs, MAX_BATCH, MAX_QUEUE_DELAY_US, checked,
                       _server_threads(log_file, DEMO_MODEL), str(log_file))


def _server_threads(log_file: Path, model: str) -> int:
    """The intra-op threads the backend logged for ``model`` as it loaded; 0 if it did not."""
    pattern = re.compile(rf"model {re.escape(model)} version \d+: .*; (\d+) intra-op thread")
    try:
        found = pattern.findall(log_file.read_text(errors="replace"))
    except OSError:
        return 0
    return int(found[-1]) if found else 0
