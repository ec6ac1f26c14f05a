"""A staged package's check against eager, and its move onto the output once it
passed: the last two steps of every .pt2 export, whichever settings compiled it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..package.archive import read_package_spec, rewrite_package_metadata
from ..package.spec import PackageSpec
from ..runtime.aoti import load_package
from ..runtime.tensor_files import save_references
from ..verify.tolerance import FAILED, list_verdict
from .eager_check import Check, recorded_check, spec_dynamic_dims, verify_against_eager
from .result import BuildResult
from .stages import ExportRun


@dataclass
class StagedCheck:
    """What checking one staged package found: its spec, the checks, and the outputs
    and eager's (for the references) at the example."""

    spec: PackageSpec
    checks: list[Check]
    outputs: list[torch.Tensor] | None = None
    eager: list[torch.Tensor] | None = None

    @property
    def passed(self) -> bool:
        return list_verdict([comparison for _, comparison in self.checks]) != FAILED


def check_staged(run: ExportRun, package_path: Path, result: BuildResult) -> StagedCheck:
    """Check the staged package against eager (when the options ask for it); the
    result's spec, checks and ``written`` (whether it may be written) follow."""
    example, options = run.example, run.options
    spec = read_package_spec(package_path)
    found = StagedCheck(spec, [])
    if options.check:
        package = load_package(package_path, spec)
        found.checks, found.outputs, found.eager = verify_against_eager(
            example.model, example.call, example.dynamic_dims or spec_dynamic_dims(spec), options.seed, package.run,
            "the package", "package", result.tolerance, spec,
        )
    result.spec, result.checks, result.written = spec, found.checks, found.passed
    return found


def save_staged_references(run: ExportRun, found: StagedCheck) -> None:
    """The example inputs, this package's outputs and eager's, where the options ask
    (written whether or not the package passed: they show what differed)."""
    if run.options.references is not None and found.outputs is not None:
        save_references(run.options.references, run.example.inputs, found.outputs, found.eager,
                        found.spec.named_outputs(len(found.outputs)))


def put_in_place(run: ExportRun, package_path: Path, key: str, result: BuildResult, found: StagedCheck) -> None:
    """Record the checks (and the cache key) of a package that passed them, and move
    it onto the output."""
    options = run.options
    spec = found.spec
    # The key is recorded only in a package that passed, so only such a package is
    # ever reused; an unchecked one records no checks.
    spec.cache_key = key if options.check else ""
    spec.eager_check = result.tolerance
    spec.verified = [[label, recorded_check(comparison)] for label, comparison in found.checks]
    rewrite_package_metadata(package_path, package_path, spec.to_metadata())
    package_path.replace(run.output)
    result.spec, result.checks, result.written = spec, found.checks, True
