"""Long-running faults of the aoti backend inside a real tritonserver: load/unload cycles
that must leave RSS, open file descriptors and $TMPDIR flat, and the faults a client or
an operator causes mid-request (a cancelled gRPC call, a client that hangs up, an unload
with requests queued), each of which must fail alone while the server keeps serving.
One server for the module, in explicit model-control mode, with $TMPDIR a fresh folder."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from aoti_deploy.serve import triton_client, triton_config, triton_server
from aoti_deploy.serve.loopback import LOOPBACK
from aoti_deploy.serve.served_models import ServedModel, read_repository
from aoti_deploy.serve.soak import soak_cycles, unload_and_wait
from aoti_deploy.serve.triton_repository import write_repository
from aoti_deploy.verify.bits import bit_view

from conftest import Build, CompiledPackage, PACKAGE_SHAPE, require_triton_server

pytestmark = pytest.mark.triton

SOAKED = "soaked"  # the suite's identity package, cycled
STEADY = "steady"  # the same package, loaded for the whole module: the "other model"
SLOW = "slow"  # the same package, execute waits (test_delay_ms) before it runs a batch
SLOW_DELAY_MS = 1500


@dataclass(frozen=True)
class SoakServer:
    server: triton_server.TritonServer
    repository: Path
    tmpdir: Path

    def model(self, name: str) -> ServedModel:
        return read_repository(self.repository, [name])[0]

    def names(self, name: str) -> triton_config.TensorNames:
        return triton_config.TensorNames.of(self.model(name))


def same_bits(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    """Bit for bit: the tensors viewed as integers of the same width (torch.equal alone
    calls -0.0 equal to +0.0 and NaN unequal to NaN)."""
    return len(actual) == len(expected) and all(
        a.dtype == e.dtype and a.shape == e.shape and torch.equal(bit_view(a), bit_view(e))
        for a, e in zip(actual, expected)
    )


def add_parameters(model_dir: Path, parameters: dict[str, str]) -> None:
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + "".join(
        f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n' for key, value in parameters.items()))


@pytest.fixture(scope="module")
def soak_server(tmp_path_factory: pytest.TempPathFactory, build: Build,
                compiled_package: CompiledPackage) -> SoakServer:
    require_triton_server()
    work = tmp_path_factory.mktemp("triton_soak")
    repository = work / "repository"
    for name in (SOAKED, STEADY, SLOW):
        write_repository(compiled_package.path, repository, name=name, op_libraries=[build.op_library])
    add_parameters(repository / SLOW, {"test_delay_ms": str(SLOW_DELAY_MS)})
    tmpdir = work / "tmp"
    tmpdir.mkdir()
    server = triton_server.TritonServer().start(
        repository, backend_dir=build.dir / "backends", log_file=work / "tritonserver.log",
        model_control_explicit=True, extra_args=[f"--load-model={STEADY}"], env={"TMPDIR": str(tmpdir)})
    try:
        server.wait_ready(120, models=[STEADY])
        yield SoakServer(server, repository, tmpdir)
    finally:
        code = server.stop()
    assert code == 0, server.log_tail()
    # The pool's loaders go with the server, and with them every folder they extracted.
    assert not os.listdir(tmpdir), os.listdir(tmpdir)


def inputs(seed: int) -> list[torch.Tensor]:
    return [torch.randn(PACKAGE_SHAPE, generator=torch.Generator().manual_seed(seed))]


def still_serving(soak: SoakServer, seed: int) -> None:
    """The server is alive and ready, and another model answers with the right bits."""
    assert soak.server.running(), soak.server.log_tail()
    with urllib.request.urlopen(f"{soak.server.http_url}/v2/health/ready", timeout=10) as response:
        assert response.status == 200
    sent = inputs(seed)
    assert same_bits(triton_client.infer(soak.server.grpc_url, "grpc", STEADY, sent), sent)
    assert same_bits(triton_client.infer(soak.server.http_url, "http", STEADY, sent), sent)


def test_30_load_unload_cycles_stay_flat(soak_server: SoakServer) -> None:
    """30 cycles of load, 4 requests (HTTP and gRPC, each answer bit for bit), unload:
    after a warm-up of 10 cycles, the server's RSS and open fds stay within 1.1x and
    its $TMPDIR holds no more entries than after warm-up (the loader pool keeps one
    extracted package for the next load; the module's teardown checks that it goes
    with the server). scripts/triton_soak.py runs the same for 200 cycles."""
    report = soak_cycles(soak_server.server, soak_server.model(SOAKED), 30, warmup=10, tmpdir=soak_server.tmpdir)
    print(f"\n{report.samples[0]}\n{report.warm}\n{report.end}\n{report.seconds:.1f} s")
    assert report.passed, report.problems()
    assert report.requests == 120
    still_serving(soak_server, seed=1)


def inference_counts(soak: SoakServer, model: str) -> dict[str, int]:
    """The model's per-phase counts (success, fail, ...), summed over its versions."""
    with urllib.request.urlopen(f"{soak.server.http_url}/v2/models/{model}/stats", timeout=10) as response:
        stats = json.load(response)["model_stats"]
    counts: dict[str, int] = {}
    for version in stats:
        for phase, value in version["inference_stats"].items():
            counts[phase] = counts.get(phase, 0) + int(value["count"])
    return counts


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.05)


def test_a_cancelled_grpc_request_fails_alone(soak_server: SoakServer) -> None:
    """Two gRPC calls to the slow model, both cancelled by the client: the first while
    the backend holds it (execute waits before running), the second while it waits in
    Triton's queue behind the first. Each gets CANCELLED; the backend runs neither and
    says so in the log (the model's statistics count failures, no success), and the
    model and the server go on serving."""
    import tritonclient.grpc as grpcclient

    server = soak_server.server
    server.load_model(SLOW)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        before = inference_counts(soak_server, SLOW)
        log_offset = len(server.log_file.read_text(errors="replace"))
        results: list[tuple[object, object]] = []
        done = threading.Event()

        def callback(result: object, error: object) -> None:
            results.append((result, error))
            if len(results) == 2:
                done.set()

        calls = []
        for seed in (10, 11):
            request = grpcclient.InferInput(soak_server.names(SLOW).inputs[0], list(PACKAGE_SHAPE), "FP32")
            request.set_data_from_numpy(inputs(seed)[0].numpy())
            calls.append(client.async_infer(SLOW, [request], callback))
            time.sleep(0.3)  # the first is in execute's wait by now, the second queued
        for call in calls:
            call.cancel()
        assert done.wait(30), results
        for result, error in results:
            assert result is None and error is not None and "CANCELLED" in str(error).upper(), (result, error)
        # The first reached the backend: once its wait is over, it is answered CANCELLED
        # (a failure in the statistics), not run.
        wait_for(lambda: inference_counts(soak_server, SLOW).get("fail", 0) > before.get("fail", 0),
                 3 * SLOW_DELAY_MS / 1000, "the backend to fail the cancelled request")
        time.sleep(SLOW_DELAY_MS / 1000)  # the second, if Triton handed it over
        after = inference_counts(soak_server, SLOW)
        assert after.get("success", 0) == before.get("success", 0), (before, after)
        # Triton 2.51 hands the queued one to the backend too, which answers it as well.
        log = server.log_file.read_text(errors="replace")[log_offset:]
        assert log.count("the request was cancelled before model slow ran it; answered CANCELLED") == 2, log[-3000:]
        sent = inputs(12)
        assert same_bits(triton_client.infer(server.grpc_url, "grpc", SLOW, sent), sent)
    finally:
        client.close()
        unload_and_wait(server, SLOW)
    still_serving(soak_server, seed=13)


def raw_infer_request(soak: SoakServer, model: str, tensor: torch.Tensor) -> bytes:
    """An HTTP/1.1 inference request with the tensor as binary data (KServe's binary
    extension), as bytes."""
    data = tensor.contiguous().numpy().tobytes()
    names = soak.names(model)
    header = json.dumps({
        "inputs": [{"name": names.inputs[0], "shape": list(tensor.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)}}],
        "outputs": [{"name": names.outputs[0], "parameters": {"binary_data": True}}],
    }).encode()
    head = (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {LOOPBACK}:{soak.server.http_port}\r\n"
            f"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(header) + len(data)}\r\n\r\n").encode()
    return head + header + data


@pytest.mark.parametrize("cut", ["whole request", "cut short"])
def test_a_client_that_hangs_up_mid_request_fails_alone(cut: str, soak_server: SoakServer) -> None:
    """A raw HTTP client sends an inference request to the slow model (all of it, or
    cut short) and closes the socket at once, four times over: the server runs each
    whole one and never a cut one, and keeps serving; its open fds do not grow."""
    server = soak_server.server
    server.load_model(SLOW)
    try:
        before = inference_counts(soak_server, SLOW)
        fds = server.open_fds()
        for seed in range(20, 24):
            request = raw_infer_request(soak_server, SLOW, inputs(seed)[0])
            if cut == "cut short":
                request = request[: len(request) - len(request) // 4]
            with socket.create_connection((LOOPBACK, server.http_port), timeout=10) as connection:
                connection.sendall(request)
        def executed(counts: dict[str, int]) -> int:
            return counts.get("success", 0) + counts.get("fail", 0)

        if cut == "whole request":
            # Triton's HTTP front end does not see the hang-up: it runs each request.
            wait_for(lambda: executed(inference_counts(soak_server, SLOW)) >= executed(before) + 4,
                     8 * SLOW_DELAY_MS / 1000, "the four requests to be executed")
        else:
            time.sleep(SLOW_DELAY_MS / 1000)  # what would have reached the model has by now
            assert executed(inference_counts(soak_server, SLOW)) == executed(before)
        sent = inputs(25)
        assert same_bits(triton_client.infer(server.http_url, "http", SLOW, sent), sent)
        assert server.open_fds() <= fds + 2, (fds, server.open_fds())
    finally:
        unload_and_wait(server, SLOW)
    still_serving(soak_server, seed=26)


def test_unloading_a_model_with_requests_queued_fails_them_alone(soak_server: SoakServer) -> None:
    """Six concurrent gRPC requests to the slow model (one instance: one runs, five
    wait in Triton's queue), then an unload: every request ends (its bits, or an
    error), none hangs; the reloaded model and the other model serve with the right bits."""
    server = soak_server.server
    server.load_model(SLOW)
    sent = [inputs(30 + i) for i in range(6)]
    results: list[object] = [None] * len(sent)

    def send(i: int) -> None:
        try:
            results[i] = triton_client.infer(server.grpc_url, "grpc", SLOW, sent[i])
        except Exception as error:  # each request's outcome is checked below
            results[i] = error

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sent))]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    unload_and_wait(server, SLOW, timeout=len(sent) * SLOW_DELAY_MS / 1000 + 60)
    for thread in threads:
        thread.join(timeout=len(sent) * SLOW_DELAY_MS / 1000 + 60)
    assert not any(thread.is_alive() for thread in threads), "a request did not end"
    for request, result in zip(sent, results):
        assert isinstance(result, (triton_client.ServingError, list)), result
        if isinstance(result, list):
            assert same_bits(result, request)
    print("\n" + "\n".join("bits" if isinstance(result, list) else str(result) for result in results))
    assert server.running(), server.log_tail()
    server.load_model(SLOW)
    try:
        again = inputs(37)
        assert same_bits(triton_client.infer(server.grpc_url, "grpc", SLOW, again), again)
    finally:
        unload_and_wait(server, SLOW)
    still_serving(soak_server, seed=38)
