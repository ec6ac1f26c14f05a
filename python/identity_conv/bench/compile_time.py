"""The compile-time section of the benchmark: a cold export_compile of the demo model,
stage by stage, against what a user would write by hand (torch.export.export, then
torch._inductor.aoti_compile_and_package), and a warm export_compile (a cache hit),
all measured in one run. Stage functions only: the ``benchmark`` CLI prints.

Each cold run is its own process with its own Inductor cache folder, copied from one
in which Inductor has already probed the host's vector ISAs: "cold" is cold for this
model's code on a machine that has compiled before. The one-time probe is timed too."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import IdentityConvError

# Run in a fresh process: the plain flow a user writes by hand, timed after imports.
_BASELINE = """
import json, sys, time
import torch
from identity_conv.ops import load_op_library
load_op_library(sys.argv[1])
from identity_conv.models.identity import IdentityModel
model = IdentityModel(3).eval()
x = torch.randn(1, 3, 224, 224)
start = time.perf_counter()
with torch.no_grad():
    program = torch.export.export(model, (x,))
exported = time.perf_counter()
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[2])
done = time.perf_counter()
print(json.dumps({"export": exported - start, "compile": done - exported}))
"""
# The toolkit's export_and_compile (export_compile's stage function), timed the same way.
_TOOLKIT = """
import json, sys, time
from pathlib import Path
from identity_conv.compiler.pipeline import BuildConfig, export_and_compile
start = time.perf_counter()
result = export_and_compile(BuildConfig(output=Path(sys.argv[2]), op_libs=[Path(sys.argv[1])], force=True))
total = time.perf_counter() - start
assert result.written and result.passed, "the package failed its checks"
print(json.dumps({"total": total, "stages": result.timings}))
"""
_PROBE = "from torch._inductor import cpu_vec_isa; cpu_vec_isa.valid_vec_isa_list()"


@dataclass
class CompileRun:
    """One cold run: whole-process wall time and the in-process time after imports."""

    wall_s: float
    work_s: float
    stages: dict[str, float] = field(default_factory=dict)


@dataclass
class CompileTimes:
    """The compile section: medians of ``runs`` cold runs of each flow, the warm run,
    and the same cold toolkit run with Inductor's compile threads set to 1."""

    runs: int
    isa_probe_s: float  # Inductor's first-ever probe of the host's vector ISAs (cached after)
    baseline: CompileRun  # torch.export.export + aoti_compile_and_package
    toolkit: CompileRun  # export_and_compile: export, optimize, compile, verify, spec
    toolkit_one_thread: CompileRun  # the same with TORCHINDUCTOR_COMPILE_THREADS=1
    warm_s: float  # export_compile CLI, whole process, on a cache hit (median)
    default_threads: int  # Inductor's compile_threads here

    @property
    def cold_ratio(self) -> float:
        """The toolkit's cold time after imports over the plain flow's."""
        return self.toolkit.work_s / self.baseline.work_s


def _process(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise IdentityConvError(f"compile benchmark: {' '.join(args[:3])} ... failed with exit "
                                f"{result.returncode}: {(result.stderr or result.stdout).strip()[-2000:]}")
    return wall, result.stdout


def _median_run(runs: list[CompileRun]) -> CompileRun:
    """The run with the median in-process time (an odd count picks a real run)."""
    ordered = sorted(runs, key=lambda run: run.work_s)
    return ordered[(len(ordered) - 1) // 2]


def measure_compile_time(work_dir: Path, library: Path, runs: int = 1, on_step=None) -> CompileTimes:
    """Time the three flows (see the module docstring); ``on_step`` is called after each
    process. Raises IdentityConvError if a flow fails."""
    work_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "AOT_INDUCTOR_"))}
    template = work_dir / "inductor_cache_probed"
    shutil.rmtree(template, ignore_errors=True)
    probe_s, _ = _process([python, "-c", _PROBE], {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(template)})
    probe_s -= _process([python, "-c", "import torch"], base_env)[0]  # the probe alone, not the import
    step = on_step or (lambda: None)

    def cold(script: str, name: str, index: int, extra: dict[str, str]) -> CompileRun:
        cache = work_dir / f"inductor_cache_{name}_{index}"
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(template, cache)
        package = work_dir / f"compile_{name}.pt2"
        wall, out = _process([python, "-c", script, str(library), str(package)],
                             {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(cache), **extra})
        shutil.rmtree(cache, ignore_errors=True)
        data = json.loads(out.strip().splitlines()[-1])
        step()
        if "total" in data:
            return CompileRun(wall, data["total"], data["stages"])
        return CompileRun(wall, data["export"] + data["compile"], data)

    baseline, toolkit, one_thread = [], [], []
    for index in range(runs):  # interleaved, so drift in machine load hits every flow alike
        baseline.append(cold(_BASELINE, "baseline", index, {}))
        toolkit.append(cold(_TOOLKIT, "toolkit", index, {}))
        one_thread.append(cold(_TOOLKIT, "toolkit_1thread", index, {"TORCHINDUCTOR_COMPILE_THREADS": "1"}))

    # Warm: the CLI again on the package the last cold run wrote, which it must reuse.
    cli = Path(python).parent / "export_compile"
    package = work_dir / "compile_toolkit.pt2"
    env = {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(template)}
    warm = []
    for _ in range(3):
        wall, out = _process([str(cli), "--output", str(package), "--op-lib", str(library), "--no-show-graph"], env)
        if "cached: the package at --output" not in out:
            raise IdentityConvError(f"compile benchmark: the warm export_compile did not hit the cache:\n{out}")
        warm.append(wall)
    step()
    threads = _process([python, "-c", "from torch._inductor import config; print(config.compile_threads)"], base_env)[1]
    return CompileTimes(runs, probe_s, _median_run(baseline), _median_run(toolkit), _median_run(one_thread),
                        statistics.median(warm), int(threads.strip()))
