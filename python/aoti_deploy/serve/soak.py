"""A long-running check of the aoti backend inside tritonserver: one model loaded and
unloaded many times (explicit model control), with requests in between whose answers
are compared bit for bit, while the server's RSS, open file descriptors and temp folder
are sampled after every unload. Used by scripts/triton_soak.py and tests/test_triton_soak.py."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .serve_check import PythonReference, request_inputs
from .served_models import ServedModel, read_repository
from .triton_client import ServingError, infer, model_states
from .triton_config import TensorNames
from .triton_server import TritonServer

if TYPE_CHECKING:
    import torch

# Growth allowed after warm-up, for RSS and open file descriptors.
GROWTH_LIMIT = 1.1
PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class ProcessSample:
    """The server after ``cycle`` cycles (0: with the model not yet loaded)."""

    cycle: int
    rss: int  # bytes, VmRSS of /proc/PID/status
    fds: int  # entries of /proc/PID/fd
    tmp_entries: int  # entries of the server's $TMPDIR (-1: not watched)
    threads: int = 0  # Threads of /proc/PID/status: reported, not limited


@dataclass
class SoakReport:
    model: str
    cycles: int
    warmup: int  # cycles before the reference sample
    samples: list[ProcessSample] = field(default_factory=list)  # one before the cycles, then one per cycle
    requests: int = 0
    failures: list[str] = field(default_factory=list)  # failed requests, loads or unloads
    mismatches: int = 0  # answers whose bits differ from the expected
    seconds: float = 0.0
    tmp_left: list[str] | None = None  # $TMPDIR after the server stopped (None: not checked)
    limit: float = GROWTH_LIMIT

    @property
    def start(self) -> ProcessSample:
        return self.samples[0]

    @property
    def warm(self) -> ProcessSample:
        """The sample after the warm-up cycles: the reference for growth."""
        return self.samples[min(self.warmup, len(self.samples) - 1)]

    @property
    def end(self) -> ProcessSample:
        return self.samples[-1]

    @property
    def after_warmup(self) -> list[ProcessSample]:
        return self.samples[self.warmup:]

    def ratio(self, what: str) -> float:
        """The largest value after warm-up over the value after warm-up (``rss`` or ``fds``)."""
        base = getattr(self.warm, what)
        return max(getattr(sample, what) for sample in self.after_warmup) / base if base else float("inf")

    def problems(self) -> list[str]:
        """Why the soak failed; empty when it passed."""
        found = []
        if len(self.samples) <= self.cycles:
            found.append(f"only {len(self.samples) - 1} of {self.cycles} cycles ran")
        for what, label in (("rss", "RSS"), ("fds", "open file descriptors")):
            if self.samples and self.ratio(what) > self.limit:
                peak = max(getattr(sample, what) for sample in self.after_warmup)
                found.append(f"{label} grew {self.ratio(what):.3f}x after warm-up "
                             f"({getattr(self.warm, what)} -> {peak}; limit {self.limit}x)")
        watched = [sample.tmp_entries for sample in self.after_warmup if sample.tmp_entries >= 0]
        if watched and max(watched) > self.warm.tmp_entries:
            found.append(f"$TMPDIR entries grew after warm-up ({self.warm.tmp_entries} -> {max(watched)})")
        if self.tmp_left:
            found.append(f"left in $TMPDIR after the server stopped: {', '.join(self.tmp_left[:5])}")
        if self.failures:
            found.append(f"{len(self.failures)} failure(s), the first: {self.failures[0]}")
        if self.mismatches:
            found.append(f"{self.mismatches} answer(s) with other bits than expected")
        return found

    @property
    def passed(self) -> bool:
        return not self.problems()


def sample_process(server: TritonServer, cycle: int, tmpdir: Path | None) -> ProcessSample:
    tmp_entries = len(os.listdir(tmpdir)) if tmpdir is not None else -1
    status = Path(f"/proc/{server.pid}/status").read_text()
    threads = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")), 0)
    return ProcessSample(cycle, server.rss_bytes(), server.open_fds(), tmp_entries, threads)


def unload_and_wait(server: TritonServer, model: str, timeout: float = 60.0) -> None:
    """Unload, then wait until Triton has finalized the model (unload returns before).

    Raises:
        ServingError: refused, or still loaded after ``timeout`` seconds.
    """
    server.unload_model(model)
    deadline = time.monotonic() + timeout
    while True:
        states = {state.name: state for state in model_states(server.http_url)}
        if model not in states or states[model].state == "UNAVAILABLE":
            return
        if time.monotonic() > deadline:
            raise ServingError(f"model {model} still {states[model].state} {timeout:g} s after its unload")
        time.sleep(0.02)


def expected_answers(model: ServedModel, requests: int) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """``requests`` seeded random input sets at the package's example shapes, each with
    the outputs a correct server returns: the inputs for an identity package, else the
    Python runtime's outputs."""
    sets = [request.inputs for request in request_inputs(model, requests) if not request.special][:requests]
    if model.spec.is_identity:
        return [(inputs, inputs) for inputs in sets]
    reference = PythonReference(model)
    try:
        return [(inputs, reference.run(inputs)) for inputs in sets]
    finally:
        reference.close()


def soak_cycles(
    server: TritonServer,
    model: ServedModel,
    cycles: int,
    *,
    warmup: int,
    requests_per_cycle: int = 4,
    tmpdir: Path | None = None,
    on_cycle: Callable[[SoakReport], None] | None = None,
) -> SoakReport:
    """Load ``model`` in a running server (explicit model control), send it
    ``requests_per_cycle`` requests (over HTTP and gRPC in turn, through one client of
    each kept for the whole run), compare each answer bit for bit, unload it and wait
    until it is finalized; ``cycles`` times. The server is sampled before the first cycle
    and after each unload; ``tmpdir`` is the server's $TMPDIR, counted in each sample.
    A failed request is counted and the run goes on; a failed load or unload ends it.

    Args:
        on_cycle: called with the report so far after each cycle, for progress.

    Returns:
        The report (see ``SoakReport.problems``); the model is left unloaded.
    """
    import tritonclient.grpc as grpc_client
    import tritonclient.http as http_client

    from ..verify.bits import compare_bits

    report = SoakReport(model.name, cycles, warmup)
    answers = expected_answers(model, requests_per_cycle)
    names = TensorNames.of(model)
    clients = {
        "http": http_client.InferenceServerClient(server.http_url.removeprefix("http://")),
        "grpc": grpc_client.InferenceServerClient(server.grpc_url),
    }
    started = time.perf_counter()
    try:
        report.samples.append(sample_process(server, 0, tmpdir))
        for cycle in range(1, cycles + 1):
            try:
                server.load_model(model.name)
            except ServingError as error:
                report.failures.append(f"cycle {cycle}: {error}")
                break
            for index, (inputs, expected) in enumerate(answers):
                protocol = PROTOCOLS[(cycle + index) % len(PROTOCOLS)]
                report.requests += 1
                try:
                    outputs = infer(clients[protocol], protocol, model.name, inputs, names)
                except ServingError as error:
                    report.failures.append(f"cycle {cycle}, {protocol}: {error}")
                    continue
                if len(outputs) != len(expected) or not all(
                    compare_bits(actual, wanted).identical for actual, wanted in zip(outputs, expected)
                ):
                    report.mismatches += 1
            try:
                unload_and_wait(server, model.name)
            except ServingError as error:
                report.failures.append(f"cycle {cycle}: {error}")
                break
            report.samples.append(sample_process(server, cycle, tmpdir))
            report.seconds = time.perf_counter() - started
            if on_cycle is not None:
                on_cycle(report)
    finally:
        for client in clients.values():
            client.close()
    report.seconds = time.perf_counter() - started
    return report


def run_soak(
    repository: str | os.PathLike[str],
    model: str,
    *,
    backend_dir: str | os.PathLike[str],
    cycles: int = 200,
    warmup: int = 20,
    requests_per_cycle: int = 4,
    work_dir: str | os.PathLike[str] | None = None,
    timeout: float = 120.0,
    extra_args: Sequence[str] = (),
    on_cycle: Callable[[SoakReport], None] | None = None,
) -> tuple[SoakReport, TritonServer]:
    """Start tritonserver on ``repository`` in explicit model-control mode (no model
    loaded), with $TMPDIR a fresh empty folder, run ``soak_cycles`` on ``model``, stop
    the server by its PID, and list what it left in $TMPDIR.

    Args:
        work_dir: where the server's log and $TMPDIR go (default: a new temp folder).

    Returns:
        The report, and the stopped server (its log file, PID and exit code).

    Raises:
        ServingError: the server did not start; TritonUnavailableError; the
            repository's errors (no such model).
    """
    served = read_repository(repository, [model])[0]
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="triton_soak_"))
    tmpdir = work / "tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    if any(tmpdir.iterdir()):
        raise ServingError(f"{tmpdir} must be empty: it becomes the server's $TMPDIR", kind="usage")
    server = TritonServer()
    server.start(repository, backend_dir=backend_dir, log_file=work / "tritonserver.log",
                 model_control_explicit=True, extra_args=extra_args, env={"TMPDIR": str(tmpdir)})
    try:
        server.wait_ready(timeout)
        report = soak_cycles(server, served, cycles, warmup=warmup, requests_per_cycle=requests_per_cycle,
                             tmpdir=tmpdir, on_cycle=on_cycle)
    finally:
        server.stop()
    report.tmp_left = sorted(os.listdir(tmpdir))
    return report, server
