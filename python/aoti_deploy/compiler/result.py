"""What an export made: the package (or ONNX file) and its spec, the graph and the
ops it calls, the checks against eager and how long each stage took. The CLI renders
it; the Python API's Package carries it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..verify.tolerance import FAILED, Tolerance, list_verdict
from ..package.spec import PackageSpec
from .eager_check import Check
from .export import GraphCalls
from .speed import SpeedSetting

# The stages of an export, in order, as on_stage reports them.
STAGES = ("load op libraries", "build model", "export", "compile", "verify")
# The stages of the ONNX target.
ONNX_STAGES = ("load op libraries", "build model", "export", "convert to ONNX", "verify")


@dataclass
class BuildResult:
    package_path: Path
    spec: PackageSpec
    calls: GraphCalls
    graph: str
    example_inputs: list[torch.Tensor]
    # (what was compared, its comparison), e.g. ("eager vs package [1, 3, 224, 224]", ...)
    checks: list[Check]
    op_libraries: list[Path]
    tolerance: Tolerance = field(default_factory=Tolerance)
    model_name: str = "IdentityModel"
    reference_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # False when the build failed its checks: nothing was written at package_path
    # (a package already there is untouched).
    written: bool = True
    # True when the package at the output was reused (same cache key): export,
    # compile and verify were skipped, and `checks` are those of the build that made it.
    cached: bool = False
    # True when that package's compiled code was reused but verified again, under a
    # rule other than the one it recorded.
    reverified: bool = False
    # ONNX target only: (domain, op type) of each node, and the torchbind routes taken.
    onnx_nodes: list[tuple[str, str]] = field(default_factory=list)
    onnx_routes: list[str] = field(default_factory=list)
    # The speed settings (compiler/speed.py) the package was compiled with, and those
    # dropped for this model with the reason (its compile failed, or its check).
    speed_settings: list[str] = field(default_factory=list)
    # An int8 or bf16 export: the low-precision model in eager, which the package is
    # checked against (not the fp32 model the caller gave).
    reference_model: Any = None
    dropped_settings: list[tuple["SpeedSetting", str]] = field(default_factory=list)
    # What this package's settings cost it here, and the way around ("" if nothing).
    speed_cost: str = ""
    # When the checks failed: a cause this host is known for, and what to do ("" if none).
    failure_hint: str = ""

    @property
    def example_input(self) -> torch.Tensor:
        return self.example_inputs[0]

    @property
    def bit_identical(self) -> bool:
        return all(comparison.bits.identical for _, comparison in self.checks)

    @property
    def passed(self) -> bool:
        """Every output within ``tolerance`` of eager's, at every checked shape."""
        return list_verdict([comparison for _, comparison in self.checks]) != FAILED
