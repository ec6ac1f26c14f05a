"""Facts about this host that decide whether a package can run here: CPU feature
flags (AOTInductor compiles kernels with -march=native) and the machine type."""

from __future__ import annotations

import re
from pathlib import Path

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
