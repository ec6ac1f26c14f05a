"""The cold-start section of the benchmark: whole-process wall time, from process
start to exit after the first verified output, and peak RSS of the C++ runner and
of run_inference on the demo package, and of run_inference --help. Stage functions
only: ``aoti-deploy bench`` prints."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AotiDeployError
from ..runtime.cpp_runner import CppRunner

# Timed whole-process runs per command (after one untimed warm run); the median is
# reported.
COLD_START_RUNS = 7
# The trust policy of the developer's shell would refuse the bare demo package.
_TRUSTED_KEY_ENV = "AOTI_DEPLOY_TRUSTED_KEY"


@dataclass
class ProcessTiming:
    """One command's whole-process runs: wall time (ms) and the largest peak RSS (MB)."""

    name: str
    command: list[str]
    median_ms: float
    min_ms: float
    peak_rss_mb: float
    runs: int
    samples_ms: list[float] = field(default_factory=list)


@dataclass
class ColdStartResult:
    """The three cold starts, measured on the same machine in alternation."""

    package: str
    aoti_runner: ProcessTiming
    run_inference: ProcessTiming
    run_inference_help: ProcessTiming

    @property
    def timings(self) -> list[ProcessTiming]:
        return [self.aoti_runner, self.run_inference, self.run_inference_help]

    @property
    def ratio(self) -> float:
        """run_inference's median over aoti_runner's."""
        return self.run_inference.median_ms / self.aoti_runner.median_ms


def run_inference_script() -> Path:
    """The run_inference console script of this Python's environment."""
    return Path(sys.executable).parent / "run_inference"


def _timed_process(command: list[str], env: dict[str, str], expect: str | None) -> tuple[float, float]:
    """Wall time (ms) and peak RSS (MB, from wait4's rusage) of one whole process.

    Raises:
        AotiDeployError: it failed, or its output lacks ``expect``.
    """
    with tempfile.TemporaryFile() as output:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        output.seek(0)
        text = output.read().decode(errors="replace")
    if process.returncode != 0 or (expect is not None and expect not in text.splitlines()):
        raise AotiDeployError(f"{' '.join(command)} failed with exit {process.returncode}: {text.strip()}")
    return elapsed_ms, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def _time_commands(commands: dict[str, tuple[list[str], str | None]], runs: int,
                   env: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """One untimed warm run of each command, then ``runs`` rounds of all of them in
    turn: (wall ms, peak RSS MB) per run."""
    for command, expect in commands.values():
        _timed_process(command, env, expect)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, (command, expect) in commands.items():
            samples[name].append(_timed_process(command, env, expect))
    return samples


def measure_cold_start(package: Path, op_library: Path, runner: Path, run_inference: Path | None = None,
                       runs: int = COLD_START_RUNS) -> ColdStartResult:
    """Time ``aoti_runner PACKAGE OPLIB``, ``run_inference PACKAGE OPLIB`` and
    ``run_inference --help`` as whole processes: one untimed warm run each (page
    cache and dynamic loader warm), then ``runs`` rounds, the three commands
    alternating so a busy phase of a shared host weighs on each alike. Both runners
    must verify their output (print PASSED) in every run.

    The commands are started by a small helper process (this module run as a
    script), not by this one: Linux keeps a process's RSS high-water mark across
    exec, so a command forked from a process that holds torch and compiled models
    would report that process's RSS as its own peak.

    Raises:
        AotiDeployError: a run failed or did not pass.
    """
    if runs < 1:
        raise AotiDeployError(f"cold start: runs must be >= 1, got {runs}")
    script = run_inference or run_inference_script()
    env = {key: value for key, value in os.environ.items() if key != _TRUSTED_KEY_ENV}
    commands = {
        "aoti_runner": (CppRunner(package, [op_library], executable=runner).command(), "PASSED"),
        "run_inference": ([str(script), str(package), str(op_library)], "PASSED"),
        "run_inference --help": ([str(script), "--help"], None),
    }
    helper = subprocess.run([sys.executable, "-m", __name__], input=json.dumps({"commands": commands, "runs": runs}),
                            capture_output=True, text=True, env=env, timeout=600 + 120 * runs)
    if helper.returncode != 0:
        raise AotiDeployError(f"cold start: {helper.stderr.strip() or f'the helper exited {helper.returncode}'}")
    samples = json.loads(helper.stdout)
    timings = {}
    for name, (command, _) in commands.items():
        wall = [ms for ms, _ in samples[name]]
        timings[name] = ProcessTiming(name, command, statistics.median(wall), min(wall),
                                      max(rss for _, rss in samples[name]), runs, wall)
    return ColdStartResult(str(package), timings["aoti_runner"], timings["run_inference"],
                           timings["run_inference --help"])


if __name__ == "__main__":  # the helper process of measure_cold_start: JSON in, JSON out
    request = json.load(sys.stdin)
    try:
        measured = _time_commands({name: (command, expect) for name, (command, expect) in request["commands"].items()},
                                  request["runs"], dict(os.environ))
    except AotiDeployError as error:
        sys.exit(str(error))
    json.dump(measured, sys.stdout)
