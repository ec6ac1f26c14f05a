"""Facts about this host that decide whether a package can run here: CPU feature
flags (AOTInductor compiles kernels with -march=native unless a portable CPU target is
chosen) and the machine type; and the portable CPU targets export_compile offers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

# x86 /proc/cpuinfo flags that name instruction-set extensions gcc may use under
# -march=native. Other flags (hypervisor, tsc, bug workarounds...) say nothing about
# which instructions a binary may contain, so they are not required of a host.
_X86_ISA_FLAG = re.compile(
    r"^(mmx|sse\w*|ssse3|avx\w*|amx\w*|fma4?|f16c|bmi\d|abm|popcnt|movbe|adx|aes|pclmulqdq|vpclmulqdq|"
    r"vaes|gfni|sha_ni|xsave\w*|rdrand|rdseed|clflushopt|clwb|3dnowprefetch|cx8|cx16|lahf_lm|movdiri|"
    r"movdir64b|serialize|waitpkg|rdpid|hle|rtm|pku|sse4a|xop|tbm|lzcnt|wbnoinvd|enqcmd|uintr|"
    r"avx_vnni\w*|cmpccxadd|prefetchi)$"
)


def host_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags of this host ("flags" on x86, "Features" on Arm)."""
    flags: set[str] = set()
    try:
        text = cpuinfo.read_text()
    except OSError:
        return flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def instruction_set_flags(flags: set[str] | None = None) -> list[str]:
    """The flags a package compiled on this host may depend on, sorted. On Arm every
    "Features" entry is an instruction-set feature, so all are kept."""
    flags = host_cpu_flags() if flags is None else flags
    is_x86 = any(flag in flags for flag in ("sse2", "lm", "fpu"))
    return sorted(flag for flag in flags if not is_x86 or _X86_ISA_FLAG.match(flag))


def missing_cpu_flags(required: list[str], host_flags: set[str]) -> list[str]:
    """The required flags this host lacks, in the given order."""
    return [flag for flag in required if flag not in host_flags]


NATIVE = "native"


@dataclass(frozen=True)
class CpuTarget:
    """A CPU a package can be compiled for: gcc's ``-march`` value, the widest vector
    width (bits) Inductor may use within it, and the /proc/cpuinfo flags a host needs
    to run the result (the x86-64 psABI level's features, in the kernel's names)."""

    name: str
    flags: tuple[str, ...]
    simdlen: int
    summary: str


# The x86-64 psABI micro-architecture levels, cumulative, as gcc's -march values
# define them. cpuinfo spells SSE3 "pni" and LZCNT "abm"; OSXSAVE shows as "xsave".
_BASELINE = ("cmov", "cx8", "fpu", "fxsr", "mmx", "sse", "sse2")
_V2 = _BASELINE + ("cx16", "lahf_lm", "pni", "popcnt", "sse4_1", "sse4_2", "ssse3")
_V3 = _V2 + ("abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave")
_V4 = _V3 + ("avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl")
CPU_TARGETS = {
    target.name: target
    for target in (
        CpuTarget("x86-64-v2", tuple(sorted(_V2)), 128,
                  "SSE4.2, no AVX, and Inductor's kernels are scalar: Intel Nehalem, AMD Bulldozer and later"),
        CpuTarget("x86-64-v3", tuple(sorted(_V3)), 256, "AVX2 and FMA: Intel Haswell, AMD Zen and later"),
        CpuTarget("x86-64-v4", tuple(sorted(_V4)), 512,
                  "AVX-512 F/BW/CD/DQ/VL: Intel Xeon since Skylake-SP, AMD Zen 4 (not Intel client CPUs since Alder Lake)"),
    )
}
CPU_TARGET_NAMES = (NATIVE, *CPU_TARGETS)


def host_cpu_targets(host_flags: set[str]) -> list[str]:
    """The portable targets this host can run, least capable first."""
    return [name for name, target in CPU_TARGETS.items() if not missing_cpu_flags(list(target.flags), host_flags)]


def best_cpu_target(host_flags: set[str]) -> str | None:
    """The most capable portable target this host can run, or None (not x86-64)."""
    runnable = host_cpu_targets(host_flags)
    return runnable[-1] if runnable else None


def target_cpu_flags(name: str) -> list[str]:
    """The flags a package compiled for target ``name`` needs of a host: the target's
    own, or for native every instruction-set flag of this host."""
    return list(CPU_TARGETS[name].flags) if name in CPU_TARGETS else instruction_set_flags()


def check_cpu_target(name: str, host_flags: set[str] | None = None) -> None:
    """Raise InputError for an unknown target, or one this host cannot run: the
    package is verified by running it here, so the host must have the target's
    features."""
    if name not in CPU_TARGET_NAMES:
        raise InputError(f"unknown --cpu-target {name!r}; expected one of {', '.join(CPU_TARGET_NAMES)}")
    if name == NATIVE:
        return
    host_flags = host_cpu_flags() if host_flags is None else host_flags
    if "sse2" not in host_flags:
        raise InputError(f"--cpu-target {name} is an x86-64 level, and this host is not x86-64; use --cpu-target native")
    missing = missing_cpu_flags(list(CPU_TARGETS[name].flags), host_flags)
    if missing:
        best = best_cpu_target(host_flags)
        hint = f"choose --cpu-target {best} or lower" if best else "choose --cpu-target native"
        raise InputError(
            f"--cpu-target {name} needs {', '.join(missing)}, which this host lacks; export_compile verifies the "
            f"package by running it here, so {hint}, or export on a host with those features"
        )
