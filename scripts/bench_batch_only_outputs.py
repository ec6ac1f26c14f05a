"""Whether a model with one value per example ([B] output) gains from Triton batching:
the same MLP scorer served three ways by one tritonserver with this project's backend,
measured in interleaved rounds with concurrent tritonclient.http clients (one thread
and one connection each, batch-1 requests back to back). Prints each round and the
medians: throughput, client p50 and p90, requests per execution and the server's
compute per request (each execution counted once, from the model's batch statistics).

    .venv/bin/python scripts/bench_batch_only_outputs.py [--features 512 --hidden 2048]
        [--clients 8] [--requests 500] [--rounds 5] [--build build]

Models: ``unbatched`` is the [B] package with max_batch_size 0 and full shapes (what
triton-repository wrote before it used Triton's reshape); ``batched_b1`` the same
weights returning [B, 1], batched with the writer's dynamic batching (100 us queue
delay); ``batched_reshape`` the [B] package as triton-repository writes it now
(dims [1], reshape [], dynamic batching). Every model's answer is first compared bit
for bit with the Python runtime's.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.serve import triton_client, triton_server  # noqa: E402
from aoti_deploy.serve.triton_repository import write_repository  # noqa: E402
from aoti_deploy.verify.bits import bit_view  # noqa: E402

MODELS = ("unbatched", "batched_b1", "batched_reshape")


class Scorer(nn.Module):
    """x [B, features] -> an MLP -> one score per example, [B] (or [B, 1] with keep_dim)."""

    def __init__(self, features: int, hidden: int, keep_dim: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mlp = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))
        self.keep_dim = keep_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = self.mlp(x)
        return score if self.keep_dim else score.squeeze(-1)


def cpu_description() -> str:
    flags: set[str] = set()
    name = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")
    return f"{name}, {len(list(Path('/sys/devices/system/cpu').glob('cpu[0-9]*')))} CPUs, " + " ".join(
        f for f in wanted if f in flags)


def compute_ns(url: str, model: str) -> tuple[int, int]:
    """(the executions' compute ns, input + infer + output, each execution once; inference_count)."""
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats") as response:
        stats = json.loads(response.read())["model_stats"][0]
    ns = sum(int(entry[phase]["ns"]) for entry in stats.get("batch_stats", [])
             for phase in ("compute_input", "compute_infer", "compute_output"))
    return ns, int(stats["inference_count"])


def client_loop(url: str, model: str, features: int, requests: int, start: threading.Barrier,
                latencies: list[float], errors: list[str]) -> None:
    import numpy as np
    import tritonclient.http as http

    names = triton_client.model_tensor_names(url, model)
    client = http.InferenceServerClient(url.removeprefix("http://"))
    sent = http.InferInput(names.inputs[0], [1, features], "FP32")
    sent.set_data_from_numpy(np.random.default_rng(0).standard_normal((1, features), dtype=np.float32),
                             binary_data=True)
    for _ in range(5):  # a warm connection
        client.infer(model, [sent])
    start.wait(timeout=60)
    for _ in range(requests):
        began = time.perf_counter()
        try:
            client.infer(model, [sent]).as_numpy(names.outputs[0])
        except Exception as error:  # counted, and the first one shown
            errors.append(str(error))
            continue
        latencies.append(time.perf_counter() - began)
    client.close()


def one_round(url: str, model: str, features: int, clients: int, requests: int) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    start = threading.Barrier(clients + 1)
    ns_before, items_before = compute_ns(url, model)
    counts_before = triton_client.model_statistics(url, model)
    threads = [threading.Thread(target=client_loop, args=(url, model, features, requests, start, latencies, errors))
               for _ in range(clients)]
    for thread in threads:
        thread.start()
    start.wait(timeout=60)
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    ns_after, items_after = compute_ns(url, model)
    counts_after = triton_client.model_statistics(url, model)
    executions = counts_after.execution_count - counts_before.execution_count
    ordered = sorted(latencies)
    return {
        "model": model, "requests": len(latencies), "errors": len(errors), "first_error": errors[:1],
        "throughput": len(latencies) / seconds, "p50_ms": 1000 * statistics.median(ordered),
        "p90_ms": 1000 * ordered[int(0.9 * len(ordered))],
        "per_execution": (counts_after.inference_count - counts_before.inference_count) / max(1, executions),
        "compute_us": (ns_after - ns_before) / 1000 / max(1, items_after - items_before),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=500, help="per client and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a new temporary one)")
    options = parser.parse_args()
    out = options.out or Path(tempfile.mkdtemp(prefix="bench_batch_only_"))
    batch = ad.Dim("batch", min=1, max=64)
    packages = {}
    for keep_dim in (False, True):
        path = out / ("scorer_b1.pt2" if keep_dim else "scorer_b.pt2")
        if not path.exists():
            ad.export(Scorer(options.features, options.hidden, keep_dim).eval(), (torch.randn(4, options.features),),
                      dynamic_shapes={"x": {0: batch}}, package_path=path)
        packages[keep_dim] = path
    repository = out / "repository"
    write_repository(packages[False], repository, name="unbatched")
    (repository / "unbatched" / "config.pbtxt").write_text(
        'name: "unbatched"\nbackend: "aoti"\nmax_batch_size: 0\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ -1, {options.features} ] }} ]\n'
        'output [ { name: "output" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'instance_group [ { kind: KIND_CPU count: 1 } ]\n')
    write_repository(packages[True], repository, name="batched_b1")
    written = write_repository(packages[False], repository, name="batched_reshape")
    print(f"host: {cpu_description()}; torch {torch.__version__}")
    print(f"model: {options.features} -> {options.hidden} -> {options.hidden} -> 1; "
          f"{options.clients} clients x {options.requests} requests x {options.rounds} rounds")
    print(f"batched_reshape: {written.config.batching}")
    server = triton_server.TritonServer().start(repository, backend_dir=options.build / "backends",
                                                log_file=out / "tritonserver.log")
    try:
        server.wait_ready(120, models=list(MODELS))
        url = server.http_url
        x = torch.randn(3, options.features, generator=torch.Generator().manual_seed(1))
        with ad.load(packages[False]) as package:
            reference = package.run([x])[0]
        for model in MODELS:
            got = triton_client.infer(url, "http", model, [x])[0].reshape(-1)
            if not torch.equal(bit_view(got), bit_view(reference)):
                raise SystemExit(f"{model} answered other bits than the Python runtime")
        results = []
        for round_index in range(options.rounds):
            for model in MODELS:  # interleaved: drift on a shared machine hits every model alike
                result = one_round(url, model, options.features, options.clients, options.requests)
                results.append(result)
                print(f"round {round_index} " + json.dumps(result))
    finally:
        server.stop()
    print(f"\nmedians of {options.rounds} rounds (every answer checked against the Python runtime first):")
    print("| model | throughput (req/s) | p50 (ms) | p90 (ms) | requests per execution "
          "| server compute per request (us) |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in MODELS:
        mine = [r for r in results if r["model"] == model]
        print(f"| {model} | {statistics.median(r['throughput'] for r in mine):.0f} "
              f"| {statistics.median(r['p50_ms'] for r in mine):.2f} "
              f"| {statistics.median(r['p90_ms'] for r in mine):.2f} "
              f"| {statistics.median(r['per_execution'] for r in mine):.2f} "
              f"| {statistics.median(r['compute_us'] for r in mine):.0f} |")
    if any(r["errors"] for r in results):
        raise SystemExit("some requests failed: " + str(next(r["first_error"] for r in results if r["errors"])))


if __name__ == "__main__":
    main()
