"""A portable CPU target for AOTInductor: gcc's -march (``cpp.march``) and a vector
ISA no wider than the target allows (``cpp.simdlen``). Inductor otherwise picks the
compile host's widest ISA, and adds that ISA's own flags (e.g. -mavx512vnni or
-mavx512bf16) to the compile command, which would put instructions beyond the target
into the package.

The cap relies on Inductor internals (``cpu_vec_isa``), so it is checked, not assumed:
before the compile, the ISA Inductor picks must need no gcc option the level lacks
(gcc itself says which options a level enables) and the -march flag must be the
level's; after it, the package's recorded ISA must be the one expected. A torch whose
internals moved fails with a CompileError instead of writing a package beyond its
target."""

from __future__ import annotations

import functools
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import CompileError
from ..package.host import CPU_TARGETS, NATIVE

# The ISA each level gets (AOTI records it as AOTI_CPU_ISA). Inductor has no 128-bit
# x86 ISA, and it compiles with -fno-tree-loop-vectorize: x86-64-v2 kernels are scalar.
EXPECTED_ISA = {"x86-64-v2": "INVALID_VEC_ISA", "x86-64-v3": "AVX2", "x86-64-v4": "AVX512"}
# Inductor's vector-ISA list is module state: one target at a time per process.
_PATCH_LOCK = threading.Lock()


@contextmanager
def compiling_for(name: str) -> Iterator[dict[str, object]]:
    """Within the block, Inductor picks only vector ISAs the target allows. Yields the
    Inductor config entries that set the target (none for native).

    Raises:
        CompileError: this torch's Inductor would still compile beyond the target.
    """
    if name == NATIVE:
        yield {}
        return
    target = CPU_TARGETS[name]
    settings = {"cpp.march": target.name, "cpp.simdlen": target.simdlen}
    with _PATCH_LOCK:
        try:
            from torch._inductor import config, cpu_vec_isa

            host_list = _host_isa_list()
            allowed = [_capped(isa, target.simdlen) for isa in host_list()]
            cpu_vec_isa.valid_vec_isa_list = lambda: [isa for isa in allowed if isa is not None]
            with config.patch(settings):
                _check_picked_isa(name)
        except AttributeError as error:  # an Inductor internal this module relies on moved
            _restore()
            raise CompileError(_moved_internals(name, error)) from error
        except BaseException:
            _restore()
            raise
        try:
            yield settings
        finally:
            _restore()


def check_compiled_isa(name: str, metadata: dict[str, str], package: Path) -> None:
    """After the compile: the ISA AOTI recorded must be the level's.

    Raises:
        CompileError: it is not (the cap did not hold on this torch).
    """
    if name == NATIVE:
        return
    recorded = metadata.get("AOTI_CPU_ISA", "")
    if recorded != EXPECTED_ISA[name]:
        raise CompileError(
            f"the package compiled for --cpu-target {name} records vector ISA {recorded!r}, expected "
            f"{EXPECTED_ISA[name]!r}: this torch's Inductor did not keep to the target, so {package} may hold "
            f"instructions beyond it. {_NATIVE_FALLBACK}"
        )


_NATIVE_FALLBACK = "Use --cpu-target native, or a torch version this toolkit was tested with (2.13, 2.14)."


def _moved_internals(name: str, error: Exception) -> str:
    import torch

    return (f"--cpu-target {name} needs Inductor internals that torch {torch.__version__} does not have "
            f"({error}). {_NATIVE_FALLBACK}")


@functools.cache
def _host_isa_list():
    """Inductor's own function, captured once: what it finds on this host (probed)."""
    from torch._inductor import cpu_vec_isa

    return cpu_vec_isa.valid_vec_isa_list


def _restore() -> None:
    from torch._inductor import cpu_vec_isa

    try:
        cpu_vec_isa.valid_vec_isa_list = _host_isa_list()
    except AttributeError:  # never captured: nothing was replaced
        pass


def _capped(isa, simdlen: int):
    """The host ISA itself if it fits the width with no extension (AVX2 for v3 and v4),
    the base AVX-512 set for AVX-512 at v4, else None (VNNI, AMX, or too wide)."""
    from torch._inductor import cpu_vec_isa

    if type(isa) is cpu_vec_isa.VecAVX2 and simdlen >= 256:
        return isa
    if type(isa) is cpu_vec_isa.VecAVX512 and simdlen >= 512:
        return _base_avx512()
    return None


@functools.cache
def _base_avx512():
    """One AVX-512 ISA with F/BW/CD/DQ/VL only: Inductor adds -mavx512bf16 where the
    host has it. Made only from a host AVX-512 ISA that passed Inductor's probe."""
    from torch._inductor import cpu_vec_isa

    class BaseAVX512(cpu_vec_isa.VecAVX512):
        _is_avx512_bf16_supported = False

        def __bool__(self) -> bool:
            return True  # the host's AVX-512 passed Inductor's build-and-load probe

        def build_arch_flags(self) -> str:
            return cpu_vec_isa.VecAVX512._arch_flags

        def is_avx512_bf16_supported(self) -> bool:
            return False

        __hash__ = cpu_vec_isa.VecISA.__hash__

    return BaseAVX512()


def _check_picked_isa(name: str) -> None:
    """What Inductor will compile with, asked the way it asks: the ISA's gcc options
    must all be enabled by -march=<level> (gcc's own answer), and -march must be it."""
    import torch
    from torch._inductor import cpp_builder, cpu_vec_isa

    compiler = cpp_builder.get_cpp_compiler()
    arch = cpp_builder._get_cpu_arch_cflags(compiler)
    if arch != [f"march={name}"]:
        raise CompileError(f"--cpu-target {name}: torch {torch.__version__}'s Inductor would compile with {arch}, "
                           f"not -march={name}. {_NATIVE_FALLBACK}")
    isa = cpu_vec_isa.pick_vec_isa()
    if str(isa).upper() != EXPECTED_ISA[name]:
        raise CompileError(f"--cpu-target {name}: torch {torch.__version__}'s Inductor picks vector ISA "
                           f"{str(isa)!r}, expected {EXPECTED_ISA[name]!r}. {_NATIVE_FALLBACK}")
    options = set(isa.build_arch_flags().split()) if isa else set()
    beyond = sorted(options - level_options(compiler, name))
    if beyond:
        raise CompileError(f"--cpu-target {name}: torch {torch.__version__}'s Inductor adds {', '.join(beyond)}, "
                           f"which -march={name} does not enable. {_NATIVE_FALLBACK}")


@functools.cache
def level_options(compiler: str, name: str) -> frozenset[str]:
    """The -m options gcc enables for -march=<name> (``-Q --help=target``)."""
    result = subprocess.run([compiler, f"-march={name}", "-Q", "--help=target"], capture_output=True, text=True,
                            timeout=60)
    if result.returncode != 0:
        raise CompileError(f"{compiler} -march={name} failed: {result.stderr.strip()}; the C++ compiler must "
                           f"know the x86-64 psABI levels (gcc 11 or later)")
    enabled = set()
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("-m") and parts[1] == "[enabled]":
            enabled.add(parts[0])
    return frozenset(enabled)
