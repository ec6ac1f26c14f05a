"""The int8 comparison: one model, batch 1, each path timed in the same run at the
same intra-op thread count:

- the C++ runner (aoti_runner --bench) on the fp32 package (toolkit defaults) and on
  the int8 package (quantize="int8", the same calibration batches);
- ONNX Runtime fp32 on torch.onnx.export(dynamo=True) of the model, and ONNX Runtime
  int8: onnxruntime.quantization.quantize_static, QDQ format, the same calibration.

Prints a table of p50s with ratios against the fp32 package and ORT fp32, top-1
agreement with fp32 eager on held-out random batches for each int8 path, and the
host's CPU and int8 features (VNNI, AMX), on which the numbers depend.

    .venv/bin/python scripts/bench_int8.py [--model resnet18_classifier] [--threads 2] [--iterations 200]

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

import aoti_deploy  # noqa: E402
from aoti_deploy.locate import runner_path  # noqa: E402
from examples import bench_models  # noqa: E402


def cpu_features() -> str:
    flags = set()
    name = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and name == "unknown CPU":
            name = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags |= set(line.split(":", 1)[1].split())
    wanted = ["avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16"]
    return f"{name}; " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in wanted)


def runner_p50(package: Path, threads: int, iterations: int) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        done = subprocess.run([str(runner_path()), str(package), "--bench", str(iterations), "--intra-op-threads",
                               str(threads), "--bench-json", out.name], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"aoti_runner failed on {package}:\n{done.stdout}{done.stderr}")
        return json.loads(Path(out.name).read_text())["p50_us"] / 1000


def ort_p50(session, feed: dict, iterations: int) -> float:  # noqa: ANN001
    for _ in range(20):
        session.run(None, feed)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18_classifier",
                        help="a factory of examples/bench_models.py whose model returns logits")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--calibration", type=int, default=8, help="calibration batches")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "artifacts" / "bench-int8")
    args = parser.parse_args()
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    model, kwargs = getattr(bench_models, args.model)(batch=1)
    name = next(iter(kwargs))
    generator = torch.Generator().manual_seed(1)
    calibration = [{name: torch.randn(kwargs[name].shape, generator=generator)} for _ in range(args.calibration)]
    held_out = [{name: torch.randn(kwargs[name].shape, generator=generator)} for _ in range(16)]

    print(f"host: {cpu_features()}; {args.threads} intra-op threads", flush=True)
    print("exporting the fp32 and int8 packages ...", flush=True)
    fp32 = aoti_deploy.export(model, (), kwargs, package_path=out / "fp32.pt2",
                              tolerance={"rtol": 1e-4, "atol": 1e-4})
    int8 = aoti_deploy.export(model, (), kwargs, package_path=out / "int8.pt2", quantize="int8",
                              calibration=calibration)
    print(f"int8 package: {int8.spec.quantization}", flush=True)

    onnx_fp32, onnx_int8 = out / "fp32.onnx", out / "int8.onnx"
    torch.onnx.export(model, (), str(onnx_fp32), kwargs=kwargs, dynamo=True)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{name: call[name].numpy()} for call in calibration])

        def get_next(self):  # noqa: ANN201
            return next(self.items, None)

    quantize_static(str(onnx_fp32), str(onnx_int8), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions = {path: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                for path in (onnx_fp32, onnx_int8)}

    def top1(logits_of) -> float:  # noqa: ANN001
        agree = total = 0
        with torch.no_grad():
            for call in held_out:
                ref = model(**call)
                ref = (ref.logits if hasattr(ref, "logits") else ref[0]).flatten(1)
                got = torch.as_tensor(logits_of(call)).flatten(1)
                agree += int((ref.argmax(1) == got.argmax(1)).sum())
                total += ref.shape[0]
        return agree / total

    def package_logits(call):  # noqa: ANN001, ANN202
        result = int8(**call)
        return result["logits"] if isinstance(result, dict) else result[0]

    agreement = {
        "int8": top1(package_logits),
        "ort_int8": top1(lambda call: sessions[onnx_int8].run(None, {name: call[name].numpy()})[0]),
    }
    feed = {name: kwargs[name].numpy()}
    rows = {}
    for _ in range(2):  # two interleaved rounds; the lower p50 of each
        for label, measure in (
            ("C++ runner, fp32 package", lambda: runner_p50(fp32.path, args.threads, args.iterations)),
            ("C++ runner, int8 package", lambda: runner_p50(int8.path, args.threads, args.iterations)),
            ("ONNX Runtime fp32", lambda: ort_p50(sessions[onnx_fp32], feed, args.iterations)),
            ("ONNX Runtime int8 (QDQ, quantize_static)", lambda: ort_p50(sessions[onnx_int8], feed, args.iterations)),
        ):
            p50 = measure()
            rows[label] = min(rows.get(label, p50), p50)
    base, ort_base = rows["C++ runner, fp32 package"], rows["ONNX Runtime fp32"]
    agree = {"C++ runner, int8 package": agreement["int8"],
             "ONNX Runtime int8 (QDQ, quantize_static)": agreement["ort_int8"]}
    lines = [f"{args.model}, batch 1, {args.threads} threads; {cpu_features()}", "",
             "| path | p50 ms | / fp32 package | / ORT fp32 | top-1 agreement with fp32 |", "|---|---:|---:|---:|---:|"]
    for label, p50 in rows.items():
        shown = f"{100 * agree[label]:.1f} %" if label in agree else "(fp32)"
        lines.append(f"| {label} | {p50:.2f} | {p50 / base:.2f}x | {p50 / ort_base:.2f}x | {shown} |")
    text = "\n".join(lines)
    print(text)
    (out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
