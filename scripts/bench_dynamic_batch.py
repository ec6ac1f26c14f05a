"""What a dynamic batch costs a CPU package: a model exported with the toolkit's
defaults three times (static at batch 1, static at batch N, and once dynamic in batch
from 1 to N), each package timed in the C++ runner (aoti_runner --bench) at the
batches it serves, beside ONNX Runtime on torch.onnx.export(dynamo=True) of the same
model (dynamic in batch); all interleaved over --rounds rounds in one run, at the same
intra-op thread count. It also counts oneDNN's reorders in one run of each package
(ONEDNN_VERBOSE): freezing packs each convolution's weights for the batch the compile
saw, and a package run at another batch may reorder them on every call. Prints a
markdown table of the median p50s with the host's CPU and its vector features.

    .venv/bin/python scripts/bench_dynamic_batch.py [--model resnet50] [--max-batch 8]
        [--example-batch 2] [--threads 2] [--rounds 3] [--iterations 60]

Needs the onnx and hf extras.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

import onnxruntime  # noqa: E402
import torch  # noqa: E402

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.bench.results import machine_facts  # noqa: E402
from aoti_deploy.package.host import host_cpu_flags  # noqa: E402
from aoti_deploy.runtime.tensor_files import save_tensors  # noqa: E402
from bench_speed_setting import ort_p50  # noqa: E402  (scripts/, the same timing)
from examples import bench_models  # noqa: E402

FEATURES = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"]
# The vision set's tolerance (scripts/bench_real_models.py).
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def reorders_per_run(package: ad.Package, inputs: Path, threads: int) -> float:
    """oneDNN's reorder executions in one run of the package: ONEDNN_VERBOSE's count
    with 3 timed runs less its count with 1, halved (the runner's own runs before the
    timed ones, its output check and warm-up, cancel out)."""
    def reorders(timed: int) -> int:
        command = package._cpp_runner().command("--inputs", str(inputs), "--bench", str(timed), "--warmup", "1",
                                                "--intra-op-threads", str(threads))
        result = subprocess.run(command, capture_output=True, text=True, check=True,
                                env={**os.environ, "ONEDNN_VERBOSE": "1"})
        lines = result.stdout.splitlines() + result.stderr.splitlines()
        return sum(1 for line in lines
                   if line.startswith("onednn_verbose") and ",exec," in line and ",reorder," in line)

    return (reorders(3) - reorders(1)) / 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50", help="a vision factory of examples/bench_models.py")
    parser.add_argument("--max-batch", type=int, default=8, help="the dynamic package's largest batch, also timed")
    parser.add_argument("--example-batch", type=int, default=2,
                        help="the dynamic export's example batch (torch.export needs one above 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=60, help="runs per p50 at batch 1 (fewer at the largest)")
    options = parser.parse_args()
    if not 1 < options.example_batch <= options.max_batch:
        parser.error(f"--example-batch must be above 1 and at most --max-batch ({options.max_batch}); "
                     f"got {options.example_batch}")
    torch.set_num_threads(options.threads)
    batches = (1, options.max_batch)
    iterations = {1: options.iterations, options.max_batch: max(10, options.iterations // options.max_batch)}
    factory = bench_models.VISION[options.model]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        inputs = {batch: factory(batch=batch)[1] for batch in batches}
        files = {batch: save_tensors(folder / f"inputs{batch}.pt", list(kwargs.values()))
                 for batch, kwargs in inputs.items()}
        packages: dict[str, tuple[ad.Package, tuple[int, ...]]] = {}
        for batch in batches:
            print(f"==> export: static, batch {batch}", flush=True)
            model, kwargs = factory(batch=batch)
            package = ad.export(model, (), kwargs, package_path=folder / f"static{batch}.pt2", threads=options.threads,
                                tolerance=TOLERANCE, force=True)
            packages[f"static, batch {batch}"] = (package, (batch,))
        print(f"==> export: dynamic, batch 1 to {options.max_batch} (example batch {options.example_batch})",
              flush=True)
        model, kwargs = factory(batch=options.example_batch)
        name = next(iter(kwargs))
        batch_dim = ad.Dim("batch", min=1, max=options.max_batch)
        dynamic = ad.export(model, (), kwargs, dynamic_shapes={name: {0: batch_dim}},
                            package_path=folder / "dynamic.pt2", threads=options.threads, tolerance=TOLERANCE,
                            force=True)
        packages[f"dynamic, 1 to {options.max_batch}"] = (dynamic, batches)
        print("==> ONNX export (dynamic in batch)", flush=True)
        torch.onnx.export(model, (), str(folder / "model.onnx"), kwargs=kwargs, dynamo=True,
                          dynamic_shapes={name: {0: batch_dim}})
        session_options = onnxruntime.SessionOptions()
        session_options.intra_op_num_threads = options.threads
        session = onnxruntime.InferenceSession(str(folder / "model.onnx"), session_options,
                                               providers=["CPUExecutionProvider"])
        rows = [(label, batch) for label, (_, served) in packages.items() for batch in served]
        rows += [("ONNX Runtime", batch) for batch in batches]
        p50s: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
        for round_number in range(1, options.rounds + 1):
            print(f"==> round {round_number}/{options.rounds}", flush=True)
            for label, batch in rows:
                if label == "ONNX Runtime":
                    feed = {key: tensor.numpy() for key, tensor in inputs[batch].items()}
                    p50s[(label, batch)].append(ort_p50(session, feed, iterations[batch]))
                    continue
                package = packages[label][0]
                timing = package._cpp_runner().bench(files[batch], iterations[batch], max(3, iterations[batch] // 10),
                                                     "--intra-op-threads", str(options.threads))
                p50s[(label, batch)].append(float(timing["p50_us"]))
        reorders = {(label, batch): reorders_per_run(packages[label][0], files[batch], options.threads)
                    for label, batch in rows if label != "ONNX Runtime"}
        for package, _ in packages.values():
            package.close()
    flags = host_cpu_flags()
    print(f"\n{options.model}, {options.threads} threads; {machine_facts()['cpu']}: "
          + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FEATURES))
    print(f"median of {options.rounds} rounds' p50\n")
    print("| package | batch | p50 (µs) | / static package | / ONNX Runtime | oneDNN reorders per run |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, batch in rows:
        p50 = statistics.median(p50s[(label, batch)])
        static = statistics.median(p50s[(f"static, batch {batch}", batch)])
        ort = statistics.median(p50s[("ONNX Runtime", batch)])
        count = f"{reorders[(label, batch)]:.0f}" if (label, batch) in reorders else ""
        print(f"| {label} | {batch} | {p50:.0f} | {p50 / static:.2f}x | {p50 / ort:.2f}x | {count} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
