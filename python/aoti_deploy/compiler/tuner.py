"""``optimize="tune"``: compile the model under each candidate set of Inductor
settings, check each against eager, then time the verified ones in the C++ runner on the
example inputs, in interleaved rounds, and keep the fastest. The package records every candidate's row
(spec ``tuning``; ``inspect`` shows them) and compiles with the winner's settings.

Bounded by ``tune_budget`` seconds: a candidate not started by then is recorded as
not tried. The first candidate, the toolkit's defaults, is always tried."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import AotiDeployError, CompileError
from ..runtime.aoti import load_package
from ..runtime.cpp_runner import CppRunner
from .package_build import ExportedGraph, compile_staged
from .package_check import StagedCheck, check_staged, put_in_place, save_staged_references
from .result import BuildResult
from .speed import (
    RewriteFailed, SpeedSetting, applicable, compile_configs, default_settings, rewritten, settings_summary,
)
from .stages import ExportRun

# Seconds of timed runs per candidate, once its speed is known from a first few,
# split over rounds that take the candidates in turn.
_TIMING_SECONDS = 2.0
_ROUNDS = 3


@dataclass(frozen=True)
class Candidate:
    name: str
    configs: dict[str, Any]
    # The default speed settings this candidate builds on (their graph rewrites apply).
    settings: tuple[SpeedSetting, ...] = ()

    @property
    def note(self) -> str:
        """Its settings for the package's optimizations record, as an export with the
        defaults records them (so a reused package reports them)."""
        return settings_summary(list(self.settings), []) if self.settings else ""


_LINEARS = (torch.ops.aten.linear.default, torch.ops.aten.addmm.default, torch.ops.aten.mm.default)


def _has_linears(program: torch.export.ExportedProgram) -> bool:
    return any(node.op == "call_function" and node.target in _LINEARS for node in program.graph.nodes)


def candidates(run: ExportRun, program: torch.export.ExportedProgram) -> list[Candidate]:
    """The toolkit's defaults first, then the settings that won on some model in the
    measurements (docs/performance-real-models.md): Inductor's own defaults, the C++ GEMM
    template of max-autotune, and the NCHW layout (no layout optimisation); and for a
    frozen model with linears, frozen without weight packing, so that its linears run
    MKL's sgemm, not oneDNN's packed inner product (BERT at batch 8 on AVX2: 68 ms
    against 84). The user's own settings apply over each; candidates that come out the
    same are tried once. The defaults' graph rewrites apply to the candidates built on
    them."""
    options = run.options
    defaults = applicable(default_settings(options), program, run.tolerance)
    freezing, base = compile_configs(defaults, options), tuple(defaults)
    # The candidates built on the defaults name their graph rewrites too, and freezing
    # only where it is on (the user may have turned it off).
    also = "".join(f", {s.name}" for s in defaults if s.rewrite is not None)
    frozen = bool(freezing.get("freezing"))
    listed = [
        Candidate(f"toolkit defaults ({', '.join(s.name for s in defaults) or 'none apply'})", freezing, base),
        Candidate("Inductor's defaults", {**options.inductor_configs}),
        Candidate(f"{'freezing + ' if frozen else ''}C++ GEMM template{also}",
                  {**freezing, "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN",
                   **options.inductor_configs}, base),
        Candidate(f"{'freezing, ' if frozen else ''}NCHW layout{also}",
                  {**freezing, "layout_optimization": False, **options.inductor_configs}, base),
    ]
    if frozen and _has_linears(program):
        listed.append(Candidate(f"freezing, linears on MKL (no weight packing){also}",
                                {**freezing, "cpp.weight_prepack": False, **options.inductor_configs}, base))
    unique: dict[str, Candidate] = {}
    for candidate in listed:
        unique.setdefault(repr((sorted(candidate.configs.items()), [s.name for s in candidate.settings])), candidate)
    return list(unique.values())


def tune(run: ExportRun, exported: ExportedGraph, key: str, result: BuildResult) -> None:
    """Compile and check every candidate within the budget, then time the verified
    ones together; put the fastest in place. When none passes, ``result.written`` is
    False, as for any export whose check failed (the last failure's checks are in
    ``result``)."""
    tried = candidates(run, exported.program)
    deadline = time.monotonic() + run.options.tune_budget
    rows: list[dict[str, Any]] = []
    verified: list[_Verified] = []
    staged_paths: list[Path] = []
    last_failed: StagedCheck | None = None
    try:
        for i, candidate in enumerate(tried, 1):
            row = {"name": candidate.name, "inductor_configs": dict(candidate.configs), "p50_us": None, "result": ""}
            rows.append(row)
            if i > 1 and time.monotonic() > deadline:
                row["result"] = f"not tried: the tuning budget of {run.options.tune_budget:g} s was spent"
                continue
            prefix = f"tune {i}/{len(tried)}: {candidate.name}"
            try:
                staged = replace(exported, program=rewritten(list(candidate.settings), exported.program))
                path = compile_staged(run, staged, candidate.configs, candidate.note, f"{prefix}: compile")
                staged_paths.append(path)
            except CompileError as error:
                row["result"] = f"the compile failed: {str(error).strip().splitlines()[0][:300]}"
                continue
            except RewriteFailed as failed:
                row["result"] = f"{failed.setting.name}: {failed}"
                continue
            with run.stage("verify", f"{prefix}: verify"):
                found = check_staged(run, path, result)
            if not found.passed:
                last_failed = found
                worst = next(f"{label}: {c}" for label, c in found.checks if not c.passed)
                row["result"] = f"failed its check against eager: {worst}"
                continue
            verified.append(_Verified(prefix, candidate, row, path, found))
        best = _fastest(run, verified)
        if best is None:
            if last_failed is not None:
                save_staged_references(run, last_failed)
            result.written = False
            return
        best.row["result"] = "verified; chosen, the fastest"
        found = best.found
        found.spec.tuning = rows
        found.spec.optimizations += f"; tuned: {best.candidate.name}, the fastest verified of {len(tried)} candidates"
        result.spec, result.checks = found.spec, found.checks
        result.speed_settings = [best.candidate.name]
        save_staged_references(run, found)
        put_in_place(run, best.path, key, result, found)
    finally:
        for path in staged_paths:
            path.unlink(missing_ok=True)


@dataclass
class _Verified:
    """A candidate whose package passed its check, staged at ``path`` until chosen."""
    prefix: str
    candidate: Candidate
    row: dict[str, Any]
    path: Path
    found: StagedCheck


def _fastest(run: ExportRun, verified: list[_Verified]) -> _Verified | None:
    """Time the verified candidates after every compile, in interleaved rounds (each
    round in another order), and record each one's p50: the median of its rounds'.
    Timed one after another, right after each compile, the first candidate ran
    slower than the others in a measurement (docs/performance-real-models.md), and
    a host's drift over minutes fell on whichever candidate was timed then."""
    # Each timed candidate: its timer, how many iterations make about _TIMING_SECONDS
    # over the rounds (from its first runs), and its rounds' p50s.
    timed: list[tuple[_Verified, Callable[[int], float], int, list[float]]] = []
    for one in verified:
        try:
            with run.stage("tune", f"{one.prefix}: time its first runs"):
                timer = _timer(run, one.path, one.found)
                first = timer(3)
        except AotiDeployError as error:
            _untimed(one, error)
            continue
        iterations = max(5, min(200, int(_TIMING_SECONDS / _ROUNDS * 1e6 / max(first, 1.0))))
        timed.append((one, timer, iterations, []))
    for r in range(_ROUNDS):
        if not timed:
            return None
        # Round r starts at another candidate, so none is always timed first.
        start = r % len(timed)
        with run.stage("tune", f"tune: time the {len(timed)} verified candidates, round {r + 1}/{_ROUNDS}"):
            for entry in timed[start:] + timed[:start]:
                one, timer, iterations, p50s = entry
                try:
                    p50s.append(timer(iterations))
                except AotiDeployError as error:
                    _untimed(one, error)
                    timed.remove(entry)
    best: _Verified | None = None
    for one, _, _, p50s in timed:
        one.row["p50_us"], one.row["result"] = round(statistics.median(p50s), 1), "verified"
        if best is None or one.row["p50_us"] < best.row["p50_us"]:
            best = one
    return best


def _untimed(one: _Verified, error: AotiDeployError) -> None:
    one.row["result"] = f"verified, but could not be timed: {str(error).strip().splitlines()[0][:300]}"


def _timer(run: ExportRun, path: Path, found: StagedCheck) -> Callable[[int], float]:
    """A function of an iteration count giving the candidate's p50 in µs over that
    many runs of the example inputs (after a warm-up run): in the C++ runner (its own
    timing, at the package's intra-op thread count), or in the Python runtime for a
    package only Python can run (loaded once here)."""
    inputs = list(run.example.inputs)
    if found.spec.python_only_ops:
        package = load_package(path, found.spec)
        package.run(inputs)

        def in_python(iterations: int) -> float:
            package.run(inputs)
            times: list[float] = []
            for _ in range(iterations):
                started = time.perf_counter()
                package.run(inputs)
                times.append(time.perf_counter() - started)
            return statistics.median(times) * 1e6
        return in_python
    runner = CppRunner(path, [str(p) for p in run.libraries])
    threads = ("--intra-op-threads", str(run.options.intra_op_threads()))

    def in_cpp(iterations: int) -> float:
        return float(runner.bench(inputs, iterations, 1, *threads)["p50_us"])
    return in_cpp
