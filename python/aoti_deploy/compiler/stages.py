"""One export in progress, as its stages share it: what is exported (the model and
its example call), how (the options), where, with which op libraries, under which
rule, and the stage timer that reports progress."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from ..models.example import ModelExample
from ..verify.tolerance import Tolerance
from .options import ExportOptions

# A stage's timer: ``with stage("export"): ...`` reports the stage and times it.
Stage = Callable[[str], AbstractContextManager[None]]


@dataclass
class ExportRun:
    example: ModelExample
    options: ExportOptions
    output: Path
    libraries: list[Path]
    tolerance: Tolerance
    stage: Stage
    timings: dict[str, float] = field(default_factory=dict)
