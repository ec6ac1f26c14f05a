"""The low-precision comparison: for each model, at batch 1, every path timed in the
same run at the same intra-op thread count:

- the C++ runner (aoti_runner --bench) on the fp32 package (toolkit defaults), the
  bf16 package (precision="bf16", on hosts with AVX512-BF16 or AMX-BF16) and the int8
  package (quantize="int8" with 8 calibration batches for vision models;
  quantize="int8-dynamic" for the transformer);
- ONNX Runtime fp32 on torch.onnx.export(dynamo=True) of the model, and ONNX Runtime
  int8: onnxruntime.quantization.quantize_static (QDQ, per-channel weights, the same
  calibration batches) for vision models, quantize_dynamic for the transformer.

Accuracy of each low-precision path against fp32 eager on 16 held-out random inputs:
top-1 agreement for a classifier (logits), else the largest absolute difference.
Prints one table per model, with the host's CPU and its int8/bf16 features (VNNI,
AMX, AVX512-BF16), on which the numbers depend, and writes them to
--output-dir/summary.md.

    .venv/bin/python scripts/bench_int8.py [--models resnet18_classifier,resnet50,mobilenet_v2,bert_base4]
        [--threads 2] [--iterations 200]

Needs the quant, onnx and hf extras.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import aoti_deploy  # noqa: E402
from aoti_deploy.compiler.precision import BF16_FLAGS  # noqa: E402
from aoti_deploy.locate import runner_path  # noqa: E402
from aoti_deploy.package.host import host_cpu_flags  # noqa: E402
from examples import bench_models  # noqa: E402

TRANSFORMERS = {"bert_base4"}


def cpu_features() -> str:
    name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown CPU")
    flags = host_cpu_flags()
    wanted = ["avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16"]
    return f"{name}; " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in wanted)


def runner_p50(package: Path, threads: int, iterations: int) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        done = subprocess.run([str(runner_path()), str(package), "--bench", str(iterations), "--intra-op-threads",
                               str(threads), "--bench-json", out.name], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"aoti_runner failed on {package}:\n{done.stdout}{done.stderr}")
        return json.loads(Path(out.name).read_text())["p50_us"] / 1000


def ort_p50(session: Any, feed: dict, iterations: int) -> float:
    for _ in range(20):
        session.run(None, feed)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def random_call(kwargs: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A call like ``kwargs``: new random floats, new token ids below the example's largest."""
    call = {}
    for key, value in kwargs.items():
        if value.is_floating_point():
            call[key] = torch.randn(value.shape, generator=generator)
        elif key == "input_ids":
            call[key] = torch.randint(0, 30522, value.shape, generator=generator)
        else:
            call[key] = value.clone()
    return call


def first_output(result: Any) -> torch.Tensor:
    if isinstance(result, dict):
        return next(iter(result.values()))
    if hasattr(result, "logits"):
        return result.logits
    if hasattr(result, "last_hidden_state"):
        return result.last_hidden_state
    return result[0] if isinstance(result, (tuple, list)) else result


def bench_model(name: str, args: argparse.Namespace, bf16: bool) -> str:
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    out = args.output_dir / name
    out.mkdir(parents=True, exist_ok=True)
    model, kwargs = getattr(bench_models, name)(batch=1)
    generator = torch.Generator().manual_seed(1)
    calibration = [random_call(kwargs, generator) for _ in range(args.calibration)]
    held_out = [random_call(kwargs, generator) for _ in range(16)]
    transformer = name in TRANSFORMERS
    classifier = hasattr(model(**kwargs), "logits")

    print(f"{name}: exporting the fp32, bf16 and int8 packages ...", flush=True)
    packages = {"fp32": aoti_deploy.export(model, (), kwargs, package_path=out / "fp32.pt2",
                                           tolerance={"rtol": 1e-4, "atol": 1e-4})}
    if bf16:
        packages["bf16"] = aoti_deploy.export(model, (), kwargs, package_path=out / "bf16.pt2", precision="bf16")
    packages["int8"] = aoti_deploy.export(
        model, (), kwargs, package_path=out / "int8.pt2",
        **({"quantize": "int8-dynamic"} if transformer else {"quantize": "int8", "calibration": calibration}))
    print(f"{name}: int8 package: {packages['int8'].spec.quantization}", flush=True)

    onnx_fp32, onnx_int8 = out / "fp32.onnx", out / "int8.onnx"
    torch.onnx.export(model, (), str(onnx_fp32), kwargs=kwargs, dynamo=True)
    inputs = [value.name for value in ort.InferenceSession(str(onnx_fp32)).get_inputs()]

    def feed(call: dict[str, torch.Tensor]) -> dict[str, Any]:
        return {key: call[key].numpy() for key in inputs}

    if transformer:
        quantize_dynamic(str(onnx_fp32), str(onnx_int8), weight_type=QuantType.QInt8)
        ort_int8_label = "ONNX Runtime int8 (quantize_dynamic)"
    else:
        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.items = iter([feed(call) for call in calibration])

            def get_next(self) -> Any:
                return next(self.items, None)

        quantize_static(str(onnx_fp32), str(onnx_int8), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
        ort_int8_label = "ONNX Runtime int8 (QDQ, quantize_static)"
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {path: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                for path in (onnx_fp32, onnx_int8)}

    def accuracy(run: Callable[[dict[str, torch.Tensor]], Any]) -> str:
        agree = total = 0
        worst = 0.0
        with torch.no_grad():
            for call in held_out:
                ref = first_output(model(**call)).float()
                got = torch.as_tensor(first_output(run(call))).float().reshape(ref.shape)
                worst = max(worst, float((ref - got).abs().max()))
                agree += int((ref.argmax(-1) == got.argmax(-1)).sum())
                total += ref.numel() // ref.shape[-1]
        return f"top-1 {100 * agree / total:.1f} %" if classifier else f"max abs {worst:.3g}"

    paths: dict[str, tuple[Callable[[], float], str]] = {}
    for precision, package in packages.items():
        shown = "(fp32)" if precision == "fp32" else accuracy(lambda call, p=package: p(**call))
        paths[f"C++ runner, {precision} package"] = (
            lambda p=package: runner_p50(p.path, args.threads, args.iterations), shown)
    paths["ONNX Runtime fp32"] = (lambda: ort_p50(sessions[onnx_fp32], feed(kwargs), args.iterations), "(fp32)")
    paths[ort_int8_label] = (lambda: ort_p50(sessions[onnx_int8], feed(kwargs), args.iterations),
                             accuracy(lambda call: sessions[onnx_int8].run(None, feed(call))[0]))
    rows: dict[str, float] = {}
    for _ in range(2):  # two interleaved rounds; the lower p50 of each path
        for label, (measure, _) in paths.items():
            p50 = measure()
            rows[label] = min(rows.get(label, p50), p50)
    base, ort_base = rows["C++ runner, fp32 package"], rows["ONNX Runtime fp32"]
    lines = [f"**{name}**, batch 1", "",
             "| path | p50 ms | / fp32 package | / ORT fp32 | against fp32 eager |", "|---|---:|---:|---:|---:|"]
    for label, p50 in rows.items():
        lines.append(f"| {label} | {p50:.2f} | {p50 / base:.2f}x | {p50 / ort_base:.2f}x | {paths[label][1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18_classifier,resnet50,mobilenet_v2,bert_base4",
                        help="comma-separated factories of examples/bench_models.py")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--calibration", type=int, default=8, help="calibration batches (vision models)")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "artifacts" / "bench-int8")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bf16 = bool(set(BF16_FLAGS) & host_cpu_flags())
    header = f"Host: {cpu_features()}; {args.threads} intra-op threads for every path."
    print(header, flush=True)
    tables = [bench_model(name.strip(), args, bf16) for name in args.models.split(",") if name.strip()]
    text = "\n\n".join([header, *tables])
    print(text)
    (args.output_dir / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
