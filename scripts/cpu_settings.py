"""Which Inductor CPU settings make real models fastest while still passing the check
against eager: each (model, setting) is exported in a fresh process with Inductor's
FX graph cache off (every kernel is generated; compiled headers and kernels already
on disk are reused, as on any machine that has compiled before; --cold gives each
run an empty cache), verified, then timed in the C++ runner at 1 and 2 threads.

    .venv/bin/python scripts/cpu_settings.py --models bert,gpt2,resnet --repeats 3

Prints one JSON line per (model, setting) and a Markdown table at the end."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SETTINGS: dict[str, dict[str, object]] = {
    "default": {},
    "freezing": {"freezing": True},
    "max-autotune CPP GEMM": {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"},
    "freezing + max-autotune CPP GEMM": {"freezing": True, "max_autotune": True,
                                         "max_autotune_gemm_backends": "CPP,ATEN"},
}

# Run in a child process: one (model, setting), a fresh Inductor cache.
CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
import torch
import aoti_deploy as ad
from examples.hf_models import FACTORIES
name, configs, out, iterations, repeats, batch = {args!r}
model, kwargs = FACTORIES[name](batch=batch, keywords=True)
shapes = {{key: {{0: ad.Dim("batch", min=1, max=8)}} for key in kwargs}}
started = time.perf_counter()
result = {{"model": name, "configs": configs}}
try:
    package = ad.export(model, (), kwargs, dynamic_shapes=shapes, package_path=out, inductor_configs=configs, force=True)
except ad.VerificationError as error:
    result.update(verified=False, error=str(error).splitlines()[0])
except Exception as error:
    result.update(verified=False, error=f"{{type(error).__name__}}: {{str(error).splitlines()[0][:200]}}")
else:
    result["compile_s"] = time.perf_counter() - started
    result["verified"] = package.report.passed
    result["max_abs"] = max((c.max_abs or 0.0) for c in package.report.outputs)
    tensors = package.flat_inputs((), kwargs)
    for threads in (1, 2):
        runs = []
        for _ in range(repeats):
            runs.append(package._bench_cpp(tensors, iterations, iterations // 10, intra_op_threads=threads)["p50_us"])
        result[f"cpp_p50_us_{{threads}}t"] = sorted(runs)[(len(runs) - 1) // 2]
print("RESULT " + json.dumps(result))
"""


def run_one(name: str, label: str, iterations: int, repeats: int, batch: int, cold: bool,
            timeout: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="cpu_settings_") as folder:
        env = dict(os.environ, TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0")
        if cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(folder) / "inductor")
        code = CHILD.format(repo=str(REPO), args=(name, SETTINGS[label], str(Path(folder) / f"{name}.pt2"),
                                                  iterations, repeats, batch))
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"model": name, "setting": label, "verified": False,
                    "error": f"export and timing took over {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            result["setting"] = label
            return result
    return {"model": name, "setting": label, "verified": False, "error": (done.stderr or done.stdout)[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="bert,gpt2,resnet")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="an empty Inductor cache per run")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per (model, setting)")
    options = parser.parse_args()
    results = []
    for label in options.settings.split(","):
        for name in options.models.split(","):
            result = run_one(name, label, options.iterations, options.repeats, options.batch, options.cold,
                             options.timeout)
            print(json.dumps(result), flush=True)
            results.append(result)
    print("\n| model | setting | verified | cold compile (s) | C++ p50 1 thread (µs) | C++ p50 2 threads (µs) |")
    print("|---|---|---|---:|---:|---:|")
    for r in results:
        def cell(key: str) -> str:
            return f"{r[key]:.1f}" if isinstance(r.get(key), (int, float)) else "-"
        verified = "yes" if r.get("verified") else f"no ({r.get('error', '')[:80]})"
        print(f"| {r['model']} | {r['setting']} | {verified} | {cell('compile_s')} | {cell('cpp_p50_us_1t')} | "
              f"{cell('cpp_p50_us_2t')} |")


if __name__ == "__main__":
    main()
