#!/usr/bin/env python3
"""The real-model comparison: BERT-base cut to 4 layers, ResNet-18 at 224x224 and a
small causal LM, each exported once with a dynamic batch (1..8); and the vision set
(ResNet-50, EfficientNet-B0, MobileNetV2, ConvNeXt-T, ViT-Tiny; examples/bench_models.py),
exported as a user who gives no dynamic dims does, static in shape, once per batch.
Each package is verified against eager with the toolkit's defaults, then benchmarked
in one run against eager, torch.compile (default and max-autotune; --no-max-autotune
leaves the latter out), the Python runtime and ONNX Runtime, at the same thread count.

Prints and writes, under --output-dir:
  <model>/bench.{json,md,png}   every path's rows (aoti-deploy bench's format)
  summary.md, summary.json      one row per model and batch: the C++ runner's p50
                                against ONNX Runtime, eager and torch.compile
                                max-autotune, as ratios measured in this run; the
                                export's cold and warm (cache hit) times

    .venv/bin/python scripts/bench_real_models.py [--models bert_base4,resnet18,causal_lm]
        [--threads 2] [--iterations 100] [--rounds 1] [--batches 1,8] [--no-max-autotune]
        [--baseline] [--tune [--tune-budget 600]] [--summary-only]
        [--output-dir artifacts/bench-real]

--baseline also times each model compiled with Inductor's own defaults (freezing
off); --tune also exports it with optimize="tune" and times the tuned package; both
in the C++ runner, in the same run. summary.md names the host's CPU and its vector
features, on which every ratio depends.

Cold means a fresh Inductor cache (a new TORCHINDUCTOR_CACHE_DIR for this run), so
every kernel is compiled; warm is the same export again, a cache hit on the package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Before torch imports: a cold compile is one with nothing cached.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_cold_"))

import torch  # noqa: E402

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.bench.results import machine_facts  # noqa: E402
from aoti_deploy.package.host import host_cpu_flags  # noqa: E402
from aoti_deploy.bench.package_bench import (  # noqa: E402
    COMPILE, COMPILE_MAX, EAGER, ONNX, PYTHON, at_batch, cpp_row, write_outputs)
from aoti_deploy.models.call import CallInputs  # noqa: E402
from examples.bench_models import FACTORIES, VISION  # noqa: E402


# Compiled against eager under torch.testing's float32 defaults (rtol 1.3e-6, atol 1e-5),
# except ResNet-18: 18 layers of convolutions summed in another order drift past an
# atol of 1e-5 on near-zero activations (2.5e-5 seen), so it is held to 1e-4.
TOLERANCES: dict[str, dict[str, float] | None] = {"resnet18": {"rtol": 1e-4, "atol": 1e-4}}
# The vision set: 1000 logits after 16 to 50 layers, summed in another order than eager's
# (oneDNN's prepacked convolutions, BatchNorm folded into them): ResNet-50's logits
# differ by up to 5e-5 in absolute terms at a spread of 0.6, so atol 1e-4 for these too.
TOLERANCES.update({name: {"rtol": 1e-4, "atol": 1e-4} for name in VISION})


def builds(name: str, batches: list[int]) -> list[tuple[str, int, list[int]]]:
    """(folder, export batch, benchmark batches) of a model: the vision set static in
    shape, one package per batch; the others one package dynamic in batch."""
    if name in VISION:
        return [(name if batch == 1 else f"{name}-b{batch}", batch, [batch]) for batch in batches]
    return [(name, 2, batches)]


def dynamic_shapes(kwargs: dict[str, torch.Tensor]) -> dict[str, dict[int, object]]:
    batch = ad.Dim("batch", min=1, max=8)
    return {name: {0: batch} for name in kwargs}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def export_timed(model, kwargs, path: Path, shapes, name: str, **options) -> tuple[ad.Package, float, float]:  # noqa: ANN001
    """Export twice: cold (forced), then warm (the cache hit); the package and both times."""
    started = time.perf_counter()
    ad.export(model, (), kwargs, dynamic_shapes=shapes, package_path=path, force=True, tolerance=TOLERANCES.get(name),
              on_stage=lambda stage: print(f"    {stage}", flush=True), **options).close()
    cold = time.perf_counter() - started
    started = time.perf_counter()
    package = ad.export(model, (), kwargs, dynamic_shapes=shapes, package_path=path, tolerance=TOLERANCES.get(name),
                        **options)
    return package, cold, time.perf_counter() - started


def cpp_p50(package: ad.Package, kwargs: dict, batch: int, options: argparse.Namespace) -> float:
    """The package's p50 in the C++ runner at ``batch``: the median of --rounds runs."""
    sized = at_batch(CallInputs.of((), kwargs), batch)
    tensors = package.flat_inputs(sized.args, sized.kwargs)
    return statistics.median(
        float(package._bench_cpp(tensors, options.iterations, max(5, options.iterations // 10),
                                 intra_op_threads=options.threads)["p50_us"]) for _ in range(options.rounds))


def run_one(name: str, folder_name: str, export_batch: int, bench_batches: list[int],
            options: argparse.Namespace) -> None:
    """Export, verify and benchmark one package; writes its bench.* and export.json."""
    print(f"\n==> {folder_name}: export (cold), then again (warm)", flush=True)
    model, kwargs = FACTORIES[name](batch=export_batch)
    shapes = None if name in VISION else dynamic_shapes(kwargs)
    folder = options.output_dir / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    package, cold, warm = export_timed(model, kwargs, folder / f"{name}.pt2", shapes, name)
    result = package.result
    verified = str(package.report).splitlines()[0] if package.report else "-"
    print(f"    cold export {cold:.1f} s, warm export {warm:.2f} s; speed settings "
          f"{', '.join(result.speed_settings) or 'none'}; verified: {verified}", flush=True)
    export = {"cold_export_s": round(cold, 1), "warm_export_s": round(warm, 2), "tolerance": TOLERANCES.get(name),
              "verified": verified, "speed_settings": result.speed_settings,
              "dropped_settings": [[s.name, why] for s, why in result.dropped_settings]}
    if options.baseline:
        # The same model with the defaults of before: Inductor's own (no freezing).
        print(f"==> {folder_name}: the package with Inductor's defaults (freezing off), for comparison", flush=True)
        before, cold_before, _ = export_timed(model, kwargs, folder / f"{name}-inductor-defaults.pt2", shapes, name,
                                              inductor_configs={"freezing": False})
        p50s = {str(batch): cpp_p50(before, kwargs, batch, options) for batch in bench_batches}
        export.update(inductor_defaults_cpp_p50_us=p50s, inductor_defaults_cold_export_s=round(cold_before, 1))
        before.close()
    if options.tune:
        # The same model tuned (optimize="tune"): the fastest verified candidate, timed
        # in the C++ runner at each batch the package is benchmarked at.
        print(f"==> {folder_name}: the package tuned (optimize='tune', budget {options.tune_budget:g} s)", flush=True)
        tuned, cold_tuned, _ = export_timed(model, kwargs, folder / f"{name}-tuned.pt2", shapes, name,
                                            optimize="tune", tune_budget=options.tune_budget)
        chosen = next((row["name"] for row in tuned.spec.tuning if "chosen" in row["result"]), "-")
        p50s = {str(batch): cpp_p50(tuned, kwargs, batch, options) for batch in bench_batches}
        export.update(tuned_cpp_p50_us=p50s, tuned_choice=chosen, tuned_export_s=round(cold_tuned, 1),
                      tuning=[{k: row[k] for k in ("name", "p50_us", "result")} for row in tuned.spec.tuning])
        tuned.close()
    print(f"==> {folder_name}: benchmark at batch {', '.join(map(str, bench_batches))}, {options.threads} threads",
          flush=True)
    bench = package.benchmark((), kwargs, model=model, batches=tuple(bench_batches), threads=options.threads,
                              iterations=options.iterations, warmup=max(5, options.iterations // 10),
                              rounds=options.rounds,
                              max_autotune=options.max_autotune, compile_timeout=options.compile_timeout,
                              on_step=lambda step: print(f"    {step}", flush=True))
    write_outputs(bench, folder, title=folder_name)
    (folder / "export.json").write_text(json.dumps(export, indent=2) + "\n")
    print(bench.markdown(), flush=True)
    package.close()


def summary_rows(output_dir: Path, threads: int) -> list[dict[str, object]]:
    """One row per model and batch with results in ``output_dir`` (this run's, and
    earlier runs' of the others: each folder's rows are from one run)."""
    rows: list[dict[str, object]] = []
    for name in FACTORIES:
        for folder_name, _, _ in builds(name, [1, 8]):
            folder = output_dir / folder_name
            if not (folder / "bench.json").is_file() or not (folder / "export.json").is_file():
                continue
            bench = json.loads((folder / "bench.json").read_text())
            export = json.loads((folder / "export.json").read_text())
            used = bench.get("threads", threads)
            for batch in bench["batches"]:
                def p50(path_name: str, batch: int = batch) -> float | None:
                    row = next((r for r in bench["rows"] if r["path"] == path_name and r["batch"] == batch), None)
                    return row["p50_us"] if row and not row.get("skipped") else None

                rows.append({
                    "model": name, "batch": batch, "threads": used, "rounds": bench.get("rounds", 1),
                    "cpp_p50_us": p50(cpp_row(used)) if used > 1 else p50(cpp_row(1)),
                    "cpp_1_thread_p50_us": p50(cpp_row(1)), "python_p50_us": p50(PYTHON), "onnx_p50_us": p50(ONNX),
                    "eager_p50_us": p50(EAGER), "compile_p50_us": p50(COMPILE),
                    "max_autotune_p50_us": p50(COMPILE_MAX), **export,
                })
    return rows


def p50_at_batch(row: dict[str, object], key: str) -> float | None:
    """The row's p50 under ``key`` at the row's batch: the C++ runner's
    (``cpp_p50_us``), or that of the package compiled with Inductor's defaults
    (``inductor_defaults_cpp_p50_us``) or tuned (``tuned_cpp_p50_us``), recorded per
    batch or, for a package static in shape, as one number."""
    value = row.get(key)
    if isinstance(value, dict):
        return value.get(str(row["batch"]))
    return value if isinstance(value, (int, float)) else None


def markdown(rows: list[dict[str, object]], threads: int) -> str:
    def us(value: object) -> str:
        return f"{value:.0f}" if isinstance(value, (int, float)) else "-"

    lines = [
        f"| model | batch | C++ runner p50 (µs, {threads} threads) | Python runtime | ONNX Runtime | eager | "
        "torch.compile | C++ / ORT | C++ / eager | C++ / torch.compile | C++ / ORT, Inductor's defaults | "
        "C++ / ORT, tuned | cold export (s) | warm export (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cpp = row["cpp_p50_us"]
        lines.append(
            f"| {row['model']} | {row['batch']} | {us(cpp)} | {us(row['python_p50_us'])} | {us(row['onnx_p50_us'])} | "
            f"{us(row['eager_p50_us'])} | {us(row['compile_p50_us'])} | {ratio(cpp, row['onnx_p50_us'])} | "
            f"{ratio(cpp, row['eager_p50_us'])} | {ratio(cpp, row['compile_p50_us'])} | "
            f"{ratio(p50_at_batch(row, 'inductor_defaults_cpp_p50_us'), row['onnx_p50_us'])} | "
            f"{ratio(p50_at_batch(row, 'tuned_cpp_p50_us'), row['onnx_p50_us'])} | "
            f"{row['cold_export_s']} | {row['warm_export_s']} |"
        )
    # The measure: the geometric mean of C++ / ORT at batch 1 over the vision
    # models it names, and the worst one.
    gate = [row for row in rows if row["batch"] == 1 and row["model"] in GATED and row["cpp_p50_us"]
            and row["onnx_p50_us"]]
    for label, key in (("", "cpp_p50_us"), (", tuned", "tuned_cpp_p50_us")):
        p50s = [p50_at_batch(row, key) for row in gate]
        if gate and all(p50s):
            ratios = [float(p50) / float(row["onnx_p50_us"]) for p50, row in zip(p50s, gate)]  # type: ignore[arg-type]
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            worst = max(zip(ratios, (row["model"] for row in gate)))
            lines.append("")
            lines.append(f"Batch 1, C++ / ORT{label} over {', '.join(str(row['model']) for row in gate)}: geometric "
                         f"mean {mean:.2f}x, highest {worst[0]:.2f}x ({worst[1]}).")
    return "\n".join(lines) + "\n"


def host_line() -> str:
    """The host's CPU and the vector features the numbers depend on."""
    flags = host_cpu_flags()
    return (f"Host: {machine_facts()['cpu']}, {os.cpu_count()} CPUs; "
            + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in FEATURES)
            + f"; torch {torch.__version__}.")


# The vector features named beside a table (scripts/bench_speed_setting.py's).
FEATURES = ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"]
# The vision models whose batch-1 geometric mean the issue sets a goal for.
GATED = ("resnet50", "efficientnet_b0", "convnext_tiny", "vit_tiny")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(FACTORIES), help="comma-separated: " + ", ".join(FACTORIES))
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for every path")
    parser.add_argument("--iterations", type=int, default=100, help="timed runs per path and batch (per round)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every path this many times, the paths in turn, and report the medians "
                        "(--baseline and --tune: their package's own rounds, before the others)")
    parser.add_argument("--batches", default="1,8", help="batches to measure (the vision set: one package each)")
    parser.add_argument("--no-max-autotune", dest="max_autotune", action="store_false",
                        help="leave out torch.compile max-autotune (minutes per model on 2 cores)")
    parser.add_argument("--baseline", action="store_true",
                        help="also time, in the C++ runner, each package compiled with Inductor's defaults "
                             "(freezing off), as the toolkit compiled before")
    parser.add_argument("--tune", action="store_true",
                        help="also export each model with optimize='tune' and time the tuned package in the C++ runner")
    parser.add_argument("--tune-budget", type=float, default=600.0, help="seconds the tuner may spend per model")
    parser.add_argument("--summary-only", action="store_true",
                        help="run nothing: rebuild summary.md and summary.json from the folders in --output-dir")
    parser.add_argument("--compile-timeout", type=float, default=900.0, help="seconds a torch.compile may take")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "artifacts" / "bench-real")
    options = parser.parse_args()
    names = [n.strip() for n in options.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; expected some of {', '.join(FACTORIES)}")
    if options.rounds < 1 or options.iterations < 1:
        parser.error(f"--rounds and --iterations must be >= 1 (given {options.rounds} and {options.iterations})")
    batches = sorted({int(b) for b in options.batches.split(",") if b.strip()})
    torch.set_num_threads(options.threads)
    options.output_dir.mkdir(parents=True, exist_ok=True)
    for name in names if not options.summary_only else []:
        for folder_name, export_batch, bench_batches in builds(name, batches):
            run_one(name, folder_name, export_batch, bench_batches, options)
    rows = summary_rows(options.output_dir, options.threads)
    rounds = sorted({int(row["rounds"]) for row in rows})  # type: ignore[call-overload]
    timing = ("Each row's paths were timed in " + " or ".join(map(str, rounds)) + " rounds, in turn; the figures "
              "are the medians of the rounds'.\n\n") if rounds and rounds != [1] else ""
    table = host_line() + "\n\n" + timing + markdown(rows, options.threads)
    (options.output_dir / "summary.md").write_text(table)
    (options.output_dir / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n==> summary (ratios measured in this run; below 1.00x the C++ runner is faster)\n" + table)
    print(f"wrote {options.output_dir / 'summary.md'} and each model's bench.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
