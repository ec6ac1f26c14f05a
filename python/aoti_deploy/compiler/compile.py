"""Stage 2: AOTInductor compile of an exported program into a .pt2 package that
carries the toolkit's metadata."""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CompileError
from ..package.host import NATIVE
from ..package.spec import PackageSpec
from ..package.archive import read_package_metadata
from .cpu_target import check_compiled_isa, compiling_for


def compile_package(
    program: torch.export.ExportedProgram, package_path: str | Path, spec: PackageSpec, cpu_target: str = NATIVE
) -> Path:
    """Compile ``program`` with AOTInductor and write the package.

    Args:
        program: the exported program.
        package_path: where to write the ``.pt2`` file; parent folders are created.
        spec: recorded in the package metadata for the runners' checks.
        cpu_target: "native" (-march=native) or a name from package.host.CPU_TARGETS.

    Returns:
        The package path.

    Raises:
        CompileError: with Inductor's message, or the CPU target's cap did not hold
            (see cpu_target.py).
    """
    package_path = Path(package_path)
    package_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with compiling_for(cpu_target) as target_configs:
            written = torch._inductor.aoti_compile_and_package(
                program,
                package_path=str(package_path),
                inductor_configs={"aot_inductor.metadata": spec.to_metadata(), **target_configs},
            )
    except CompileError:
        raise
    except Exception as error:  # Inductor raises many unrelated types here
        raise CompileError(f"AOTInductor compile failed: {type(error).__name__}: {error}") from error
    if cpu_target != NATIVE:
        check_compiled_isa(cpu_target, read_package_metadata(written), Path(written))
    return Path(written)
