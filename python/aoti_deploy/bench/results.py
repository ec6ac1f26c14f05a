"""What every benchmark records: latency percentiles of timed samples, the machine the
numbers were measured on, a target judged on a run, and numbers JSON can hold."""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Latency:
    """Percentiles of one path at one size, in microseconds."""

    p50: float
    p90: float
    p99: float
    runs: int

    @classmethod
    def of(cls, samples_us: list[float]) -> "Latency":
        ordered = sorted(samples_us)

        def rank(p: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, int(-(-p * len(ordered) // 100)) - 1))]

        return cls(rank(50), rank(90), rank(99), len(ordered))


@dataclass
class Target:
    """One of the performance targets, as measured in this run."""

    name: str
    measured: str
    met: bool


def machine_facts() -> dict[str, str]:
    """What the numbers were measured on."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "cores": str(os.cpu_count()),
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
    }


def finite_or_none(value: object) -> object:
    """JSON has no NaN or infinity: such numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value
