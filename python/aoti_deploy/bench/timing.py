"""How the benchmarks time: a call in this process, timed sample by sample after a
warm-up; the C++ runner timing a package inside its own process (--bench); and the
median of repeated runs, so one noisy run on a shared machine does not decide."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import AotiDeployError
from .results import Latency

T = TypeVar("T")


def time_samples(fn: Callable[[], object], iterations: int, warmup: int) -> list[float]:
    """Call ``fn`` ``warmup`` times untimed, then ``iterations`` times, each timed (µs)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e3)
    return samples


def time_calls(fn: Callable[[], object], iterations: int, warmup: int) -> Latency:
    """Call ``fn`` ``warmup`` times untimed, then ``iterations`` times, each timed."""
    return Latency.of(time_samples(fn, iterations, warmup))


def median_run(runs: list[T], key: Callable[[T], float]) -> T:
    """The run whose ``key`` is the median (the lower one of an even count)."""
    ordered = sorted(runs, key=key)
    return ordered[(len(ordered) - 1) // 2]


def run_cpp_bench(
    runner: Path, package: Path, op_lib: Path, inputs: Path, iterations: int, warmup: int, work_dir: Path,
    threads: int = 1, intra_op_threads: int | None = None, malloc: str = "retain",
) -> dict[str, object]:
    """The C++ runner's --bench mode (timing inside its process, serving threads
    pinned to their own cores); its JSON result."""
    out = work_dir / f"cpp_bench_{package.stem}_{threads}.json"
    args = [str(runner), str(package), str(op_lib), "--inputs", str(inputs), "--bench", str(iterations),
            "--warmup", str(warmup), "--threads", str(threads), "--malloc", malloc, "--bench-json", str(out),
            "--pin-threads"]
    if intra_op_threads:
        args += ["--intra-op-threads", str(intra_op_threads)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise AotiDeployError(
            f"aoti_runner --bench failed with exit {result.returncode}: {(result.stderr or result.stdout).strip()}"
        )
    return json.loads(out.read_text())
