"""What one of the CPU speed defaults (compiler/speed.py) is worth: a model exported
twice with the toolkit's defaults, once without that one setting, each package timed
in the C++ runner (aoti_runner --bench), and ONNX Runtime on
torch.onnx.export(dynamo=True) of the same model; the three interleaved over
--rounds rounds in one run, at the same intra-op thread count. Prints a markdown
table of the median p50s, and the median of each round's ratio of the two packages
(this host's speed drifts between rounds; a ratio within one round does not), with
the host's CPU and its vector features, on which the numbers depend.

    .venv/bin/python scripts/bench_speed_setting.py [--setting "one-pixel convs as sums"]
        [--model efficientnet_b0] [--batch 1] [--threads 2] [--rounds 5] [--iterations 150]

Needs the onnx and hf extras.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

import onnxruntime  # noqa: E402
import torch  # noqa: E402

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.bench.results import machine_facts  # noqa: E402
from aoti_deploy.compiler import speed  # noqa: E402
from aoti_deploy.package.host import host_cpu_flags  # noqa: E402
from examples import bench_models  # noqa: E402

FEATURES = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"]
# The vision set's tolerance (scripts/bench_real_models.py): 1000 logits after deep
# stacks of convs, summed in another order than eager's.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def export(model: torch.nn.Module, kwargs: dict, path: Path, threads: int, without: str | None) -> ad.Package:
    """The model exported with the defaults, or with the defaults less ``without``."""
    defaults = speed.CPU_DEFAULTS
    if without:
        speed.CPU_DEFAULTS = tuple(setting for setting in defaults if setting.name != without)
    try:
        return ad.export(model, (), kwargs, package_path=path, threads=threads, tolerance=TOLERANCE, force=True)
    finally:
        speed.CPU_DEFAULTS = defaults


def ort_p50(session: onnxruntime.InferenceSession, feed: dict, iterations: int) -> float:
    for _ in range(max(5, iterations // 10)):
        session.run(None, feed)
    times = []
    for _ in range(iterations):
        started = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [setting.name for setting in speed.CPU_DEFAULTS]
    parser.add_argument("--setting", default="one-pixel convs as sums", choices=names,
                        help="the default to measure without")
    parser.add_argument("--model", default="efficientnet_b0", help="a factory of examples/bench_models.py")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=150)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    model, kwargs = getattr(bench_models, options.model)(batch=options.batch)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        packages = {}
        setting = options.setting
        for label, without in ((f"package, defaults without {setting}", setting), ("package, defaults", None)):
            print(f"==> export: {label}", flush=True)
            package = export(model, kwargs, folder / f"{len(packages)}.pt2", options.threads, without)
            print(f"    speed settings: {', '.join(package.result.speed_settings)}; "
                  f"{str(package.report).splitlines()[0]}", flush=True)
            if (setting in package.result.speed_settings) == bool(without):
                print(f"error: the package {'has' if without else 'lacks'} {setting!r}: "
                      f"{package.result.speed_settings}", file=sys.stderr)
                return 1
            packages[label] = package
        print("==> ONNX export", flush=True)
        torch.onnx.export(model, (), str(folder / "model.onnx"), kwargs=kwargs, dynamo=True)
        session_options = onnxruntime.SessionOptions()
        session_options.intra_op_num_threads = options.threads
        session = onnxruntime.InferenceSession(str(folder / "model.onnx"), session_options,
                                               providers=["CPUExecutionProvider"])
        feed = {name: tensor.numpy() for name, tensor in kwargs.items()}
        tensors = next(iter(packages.values())).flat_inputs((), kwargs)
        p50s: dict[str, list[float]] = {label: [] for label in [*packages, "ONNX Runtime"]}
        for round_number in range(1, options.rounds + 1):
            print(f"==> round {round_number}/{options.rounds}", flush=True)
            for label, package in packages.items():
                timing = package._bench_cpp(tensors, options.iterations, max(5, options.iterations // 10),
                                            intra_op_threads=options.threads)
                p50s[label].append(float(timing["p50_us"]))
            p50s["ONNX Runtime"].append(ort_p50(session, feed, options.iterations))
        for package in packages.values():
            package.close()
    flags = host_cpu_flags()
    print(f"\n{options.model}, batch {options.batch}, {options.threads} threads; {machine_facts()['cpu']}: "
          + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FEATURES))
    print(f"median of {options.rounds} rounds' p50, each of {options.iterations} runs\n")
    ort = statistics.median(p50s["ONNX Runtime"])
    print("| path | p50 (µs) | / ONNX Runtime |\n|---|---:|---:|")
    for label, values in p50s.items():
        print(f"| {label} | {statistics.median(values):.0f} | {statistics.median(values) / ort:.2f}x |")
    without, with_it = p50s[f"package, defaults without {setting}"], p50s["package, defaults"]
    ratios = [a / b for a, b in zip(with_it, without)]
    print(f"\nwith / without {setting}, each round: median {statistics.median(ratios):.3f} "
          f"({', '.join(f'{r:.3f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
