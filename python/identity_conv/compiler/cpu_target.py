"""A portable CPU target for AOTInductor: gcc's -march (``cpp.march``) and a vector
ISA no wider than the target allows (``cpp.simdlen``). Inductor otherwise picks the
compile host's widest ISA, and adds that ISA's own flags (e.g. -mavx512vnni or
-mavx512bf16) to the compile command, which would put instructions beyond the target
into the package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import InputError
from ..package.host import CPU_TARGET_NAMES, CPU_TARGETS, NATIVE, CpuTarget, best_cpu_target, host_cpu_flags, missing_cpu_flags


def check_cpu_target(name: str, host_flags: set[str] | None = None) -> None:
    """Raise InputError for an unknown target, or one this host cannot run: the
    package is verified by running it here, so the host must have the target's
    features."""
    if name not in CPU_TARGET_NAMES:
        raise InputError(f"unknown --cpu-target {name!r}; expected one of {', '.join(CPU_TARGET_NAMES)}")
    if name == NATIVE:
        return
    host_flags = host_cpu_flags() if host_flags is None else host_flags
    missing = missing_cpu_flags(list(CPU_TARGETS[name].flags), host_flags)
    if missing:
        best = best_cpu_target(host_flags)
        hint = f"choose --cpu-target {best} or lower" if best else "choose --cpu-target native"
        raise InputError(
            f"--cpu-target {name} needs {', '.join(missing)}, which this host lacks; export_compile verifies the "
            f"package by running it here, so {hint}, or export on a host with those features"
        )


@contextmanager
def compiling_for(name: str) -> Iterator[dict[str, object]]:
    """Within the block, Inductor picks only vector ISAs the target allows. Yields the
    Inductor config entries that set the target (none for native)."""
    if name == NATIVE:
        yield {}
        return
    from torch._inductor import cpu_vec_isa

    target = CPU_TARGETS[name]
    host_list = cpu_vec_isa.valid_vec_isa_list
    allowed = _allowed_isas(target, host_list(), cpu_vec_isa)
    cpu_vec_isa.valid_vec_isa_list = lambda: allowed
    try:
        yield {"cpp.march": target.name, "cpp.simdlen": target.simdlen}
    finally:
        cpu_vec_isa.valid_vec_isa_list = host_list


def _allowed_isas(target: CpuTarget, host_isas: list, cpu_vec_isa) -> list:
    """The host's working vector ISAs that fit the target, without extensions beyond it.
    v2 allows none (Inductor has no 128-bit x86 ISA; its kernels stay scalar and gcc
    vectorizes them with SSE only); v3 allows AVX2; v4 the base AVX-512 set."""
    class BaseAVX512(cpu_vec_isa.VecAVX512):
        """AVX-512 F/BW/CD/DQ/VL only: Inductor adds -mavx512bf16 on hosts that have it."""

        def build_arch_flags(self) -> str:
            return self._arch_flags

        def is_avx512_bf16_supported(self) -> bool:
            return False

        __hash__ = cpu_vec_isa.VecISA.__hash__

    allowed = []
    for isa in host_isas:
        if type(isa) is cpu_vec_isa.VecAVX512 and target.simdlen >= 512:
            allowed.append(BaseAVX512())
        elif type(isa) is cpu_vec_isa.VecAVX2 and target.simdlen >= 256:
            allowed.append(isa)
    return allowed
