"""How the benchmarks time: a call in this process, timed sample by sample after a
warm-up; the C++ runner timing a package inside its own process (--bench); and the
median of repeated runs, so one noisy run on a shared machine does not decide."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..runtime.cpp_runner import CppRunner
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
    runner: Path, package: Path, op_lib: Path, inputs: Path, iterations: int, warmup: int,
    threads: int = 1, intra_op_threads: int | None = None, malloc: str = "retain",
) -> dict[str, object]:
    """The C++ runner's --bench mode (timing inside its process, serving threads
    pinned to their own cores); its JSON result."""
    options = ["--threads", str(threads), "--malloc", malloc, "--pin-threads"]
    if intra_op_threads:
        options += ["--intra-op-threads", str(intra_op_threads)]
    return CppRunner(package, [op_lib], executable=runner).bench(inputs, iterations, warmup, *options, timeout=1800)
