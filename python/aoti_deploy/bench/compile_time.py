"""The compile-time section of the benchmark: a cold export_compile of the demo model,
stage by stage, against what a user would write by hand (torch.export.export, then
torch._inductor.aoti_compile_and_package), and a warm export_compile (a cache hit),
all measured in one run. Stage functions only: ``aoti-deploy bench`` prints.

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

from ..errors import AotiDeployError
from .timing import median_run

# Both flows import the same compiler modules before their clock starts, so each stage
# holds its work, not whichever import happened to land in it; the import is timed apart.
_IMPORTS = """
import json, sys, time
began = time.perf_counter()
import torch, torch._dynamo, torch._inductor.compile_fx, torch._inductor.lowering
imported = time.perf_counter() - began
"""
# Run in a fresh process: the plain flow a user writes by hand, timed after imports.
_BASELINE = _IMPORTS + """
from aoti_deploy.ops import load_op_library
load_op_library(sys.argv[1])
from aoti_deploy.models.identity import IdentityModel
model = IdentityModel(3).eval()
x = torch.randn(1, 3, 224, 224)
start = time.perf_counter()
with torch.no_grad():
    program = torch.export.export(model, (x,))
exported = time.perf_counter()
torch._inductor.aoti_compile_and_package(program, package_path=sys.argv[2])
done = time.perf_counter()
print(json.dumps({"import": imported, "total": done - start,
                  "stages": {"export": exported - start, "compile": done - exported}}))
"""
# The toolkit's export (the Python API, under aoti-deploy export), timed the same way.
_TOOLKIT = _IMPORTS + """
import aoti_deploy as ad
start = time.perf_counter()
result = ad.export(ad.IdentitySource(), package_path=sys.argv[2], op_libraries=[sys.argv[1]], force=True).result
total = time.perf_counter() - start
assert result.written and result.passed, "the package failed its checks"
print(json.dumps({"import": imported, "total": total, "stages": result.timings}))
"""
_PROBE = """
import time
from torch._inductor import cpu_vec_isa
start = time.perf_counter()
cpu_vec_isa.valid_vec_isa_list()
print(time.perf_counter() - start)
"""


@dataclass
class CompileRun:
    """One cold run: whole-process wall time, the import of torch and its compiler
    modules, and each stage after it."""

    wall_s: float
    import_s: float
    work_s: float  # after imports, to the package written (the stages and what joins them)
    stages: dict[str, float] = field(default_factory=dict)


@dataclass
class CompileTimes:
    """The compile section: medians of ``runs`` cold runs of each flow, the warm run,
    and the same cold toolkit run with Inductor's compile threads set to 1."""

    runs: int  # cold runs of each flow, in rotating order; the median run is kept
    isa_probe_s: float  # Inductor's first-ever probe of the host's vector ISAs (cached after)
    baseline: CompileRun  # torch.export.export + aoti_compile_and_package
    toolkit: CompileRun  # aoti_deploy.export: export, optimize, compile, verify, spec
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
        raise AotiDeployError(f"compile benchmark: {' '.join(args[:3])} ... failed with exit "
                                f"{result.returncode}: {(result.stderr or result.stdout).strip()[-2000:]}")
    return wall, result.stdout


def measure_compile_time(work_dir: Path, library: Path, runs: int = 3) -> CompileTimes:
    """Time the three flows (see the module docstring) ``runs`` times each, in an order
    that rotates every round, and keep each flow's median run. Raises
    AotiDeployError if a flow fails."""
    work_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "AOT_INDUCTOR_"))}
    template = work_dir / "inductor_cache_probed"
    shutil.rmtree(template, ignore_errors=True)
    probe_s = float(_process([python, "-c", _PROBE], {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(template)})[1])

    def cold(script: str, name: str, index: int, extra: dict[str, str]) -> CompileRun:
        cache = work_dir / f"inductor_cache_{name}_{index}"
        shutil.rmtree(cache, ignore_errors=True)
        shutil.copytree(template, cache)
        package = work_dir / f"compile_{name}.pt2"
        wall, out = _process([python, "-c", script, str(library), str(package)],
                             {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(cache), **extra})
        shutil.rmtree(cache, ignore_errors=True)
        data = json.loads(out.strip().splitlines()[-1])
        return CompileRun(wall, data["import"], data["total"], data["stages"])

    flows = {"baseline": (_BASELINE, {}), "toolkit": (_TOOLKIT, {}),
             "toolkit_1thread": (_TOOLKIT, {"TORCHINDUCTOR_COMPILE_THREADS": "1"})}
    measured: dict[str, list[CompileRun]] = {name: [] for name in flows}
    names = list(flows)
    for index in range(runs):  # interleaved and rotated, so drift in machine load hits every flow alike
        for name in names[index % len(names):] + names[:index % len(names)]:
            script, extra = flows[name]
            measured[name].append(cold(script, name, index, extra))
    baseline, toolkit, one_thread = (median_run(measured[name], lambda run: run.work_s) for name in flows)

    # Warm: the CLI again on the package the last cold run wrote, which it must reuse.
    cli = Path(python).parent / "export_compile"
    package = work_dir / "compile_toolkit.pt2"
    env = {**base_env, "TORCHINDUCTOR_CACHE_DIR": str(template)}
    warm = []
    for _ in range(3):
        wall, out = _process([str(cli), "--output", str(package), "--op-lib", str(library), "--no-show-graph"], env)
        if "cached: the package at --output" not in out:
            raise AotiDeployError(f"compile benchmark: the warm export_compile did not hit the cache:\n{out}")
        warm.append(wall)
    threads = _process([python, "-c", "from torch._inductor import config; print(config.compile_threads)"], base_env)[1]
    return CompileTimes(runs, probe_s, baseline, toolkit, one_thread, statistics.median(warm), int(threads.strip()))


def compile_time_table(t: CompileTimes) -> tuple[list[str], list[list[str]]]:
    """The compile section as (header, rows), for the CLI's table and the Markdown."""
    one = t.toolkit_one_thread
    rows = [
        ["torch.export.export + aoti_compile_and_package", f"{t.baseline.work_s:.2f}", f"{t.baseline.import_s:.2f}",
         f"{t.baseline.wall_s:.2f}", _stages(t.baseline)],
        ["export_compile", f"{t.toolkit.work_s:.2f}", f"{t.toolkit.import_s:.2f}", f"{t.toolkit.wall_s:.2f}",
         _stages(t.toolkit)],
        [f"export_compile, Inductor compile threads 1 (default {t.default_threads})", f"{one.work_s:.2f}",
         f"{one.import_s:.2f}", f"{one.wall_s:.2f}", _stages(one)],
        ["export_compile, warm (cache hit)", "", "", f"{t.warm_s:.2f}", ""],
        ["Inductor's vector-ISA probe (once per machine and cache folder)", f"{t.isa_probe_s:.2f}", "", "", ""],
        ["export_compile / plain, after imports", f"{t.cold_ratio:.2f}x", "", "", ""],
    ]
    header = [f"compile, demo model (cold: a fresh Inductor cache; median of {t.runs})", "after imports (s)",
              "imports (s)", "whole process (s)", "stages (s)"]
    return header, rows


def _stages(run: CompileRun) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in run.stages.items() if seconds >= 0.005)
