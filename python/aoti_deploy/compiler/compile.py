"""Stage 2: AOTInductor compile of an exported program into a .pt2 package that
carries the toolkit's metadata."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import CompileError, InputError
from ..package.host import NATIVE
from ..package.spec import PackageSpec
from ..package.archive import read_package_metadata
from .cpu_target import check_compiled_isa, compiling_for


# Settings the toolkit sets itself: a user's value would break what it records.
_RESERVED = ("aot_inductor.metadata", "aot_inductor.package", "aot_inductor.output_path", "cpp.vec_isa_ok")


@contextlib.contextmanager
def quiet_pytree_deprecation() -> Iterator[None]:
    """torch 2.13 copies a pytree spec through a deprecated path when it packages a
    program or decomposes one, and warns about it each time: not the user's business."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        yield


def check_inductor_configs(configs: Mapping[str, Any]) -> dict[str, bool | int | str]:
    """The user's Inductor settings, checked against Inductor's own config: a known
    name (``freezing``, ``max_autotune``, ``cpp.threads``...), a boolean, integer or
    string value (what a package records), none the toolkit sets itself.

    Raises:
        InputError: an unknown name (with the closest known ones), a value of
            another type, or a reserved name.
    """
    import difflib

    from torch._inductor import config as inductor_config

    known = set(inductor_config.get_config_copy())
    checked: dict[str, bool | int | str] = {}
    for key, value in configs.items():
        if key in _RESERVED or key.startswith("aot_inductor.package"):
            raise InputError(f"inductor config {key} is set by the toolkit itself; leave it out")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            raise InputError(
                f"inductor config {key!r} is not one of torch {torch.__version__}'s Inductor settings"
                + (f"; did you mean {', '.join(close)}?" if close else "")
            )
        if type(value) not in (bool, int, str):
            raise InputError(
                f"inductor config {key}={value!r}: a package records booleans, integers and strings; got a "
                f"{type(value).__name__}"
            )
        checked[key] = value
    return checked


def compile_package(
    program: torch.export.ExportedProgram, package_path: str | Path, spec: PackageSpec, cpu_target: str = NATIVE,
    inductor_configs: Mapping[str, Any] | None = None,
) -> Path:
    """Compile ``program`` with AOTInductor and write the package.

    Args:
        program: the exported program.
        package_path: where to write the ``.pt2`` file; parent folders are created.
        spec: recorded in the package metadata for the runners' checks.
        cpu_target: "native" (-march=native) or a name from package.host.CPU_TARGETS.
        inductor_configs: the user's Inductor settings (``check_inductor_configs``),
            applied under the toolkit's own.

    Returns:
        The package path.

    Raises:
        CompileError: with Inductor's message, or the CPU target's cap did not hold
            (see cpu_target.py).
    """
    package_path = Path(package_path)
    package_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Without autograd: Inductor applies freezing only when grad is disabled (and
        # says nothing otherwise), and a package is for inference.
        with compiling_for(cpu_target) as target_configs, quiet_pytree_deprecation(), torch.no_grad():
            written = torch._inductor.aoti_compile_and_package(
                program,
                package_path=str(package_path),
                inductor_configs={**(inductor_configs or {}), "aot_inductor.metadata": spec.to_metadata(),
                                  **target_configs},
            )
    except CompileError:
        raise
    except Exception as error:  # Inductor raises many unrelated types here
        raise CompileError(f"AOTInductor compile failed: {type(error).__name__}: {error}") from error
    if cpu_target != NATIVE:
        check_compiled_isa(cpu_target, read_package_metadata(written), Path(written))
    return Path(written)
