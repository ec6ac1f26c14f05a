"""Preflight: can this process run a package? Checked from the spec alone, before
the package loads: torch version, device, machine, CPU instruction sets, Python-only
ops, then (after the op libraries load) the ops and classes the package calls.

cpp_runtime/core/preflight.cpp makes the same decisions in the same order; the
vectors in tests/contract/preflight_vectors.json pin both to one verdict per case.
The host is passed in as HostFacts, so the vectors can describe any host."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import PackageError
from ..package.host import host_cpu_flags, missing_cpu_flags
from ..package.spec import OpRef, PackageSpec


@dataclass
class HostFacts:
    """What a package is checked against."""

    torch_version: str
    machine: str
    cpu_flags: set[str]
    cuda_available: bool
    has_op: Callable[[OpRef], bool]
    has_class: Callable[[str], bool]
    # The Python runtime can run Python-only ops (given their modules); C++ cannot.
    python: bool = True


def _has_op(op: OpRef) -> bool:
    import torch

    namespace, name = op.name.split("::", 1)
    packet = getattr(getattr(torch.ops, namespace), name, None)
    if packet is None:
        return False
    return op.overload is None or op.overload in packet.overloads()


def _has_class(qualname: str) -> bool:
    import torch

    namespace, name = qualname.split("::", 1)
    try:
        torch._C._get_custom_class_python_wrapper(namespace, name)
    except RuntimeError:
        return False
    return True


def this_host() -> HostFacts:
    """The facts of this process: its torch, machine, CPU and registered ops."""
    import torch

    return HostFacts(
        torch_version=torch.__version__,
        machine=platform.machine(),
        cpu_flags=host_cpu_flags(),
        cuda_available=torch.cuda.is_available(),
        has_op=_has_op,
        has_class=_has_class,
    )


def _base_version(version: str) -> str:
    """"2.13.0+cpu" -> "2.13.0": the local suffix names the build, not the ABI."""
    return version.split("+", 1)[0]


def thread_count_note(compiled: int, running: int) -> str:
    """A package compiled for ``compiled`` intra-op threads (its spec's; 0: not
    recorded) that runs at ``running``: "" when they agree, else what that costs and how
    to export for ``running``. The same words as thread_count_note in
    cpp_runtime/core/cpu_budget.cpp."""
    if compiled <= 0 or running <= 0 or compiled == running:
        return ""
    n, m = compiled, running
    return (f"this package was compiled for {n} intra-op thread(s) and runs at {m}: oneDNN laid any convolution "
            f"weights it holds out for {n}, and may lay some out again on every call at another count (a ResNet-50 "
            f"ran 2.3x slower); its outputs may differ in bits from runs at {n}. To run at {m}, export with "
            f"--threads {m} (threads={m}).")


def check_runs_here(spec: PackageSpec, host: HostFacts) -> None:
    """Raise PackageError if the package targets a torch version, device, machine or
    CPU this process cannot run, or (without Python) calls Python-only ops: instead
    of failing at load, or dying with SIGILL.

    Kinds, in the order checked: torch_version, device, machine, cpu_flags, python_only.
    """
    if _base_version(spec.torch_version) != _base_version(host.torch_version):
        raise PackageError(
            f"the package was compiled with torch {spec.torch_version}, but this process runs torch "
            f"{host.torch_version}. AOTI packages are not portable across torch versions; re-export the "
            "package with this torch.",
            kind="torch_version",
        )
    device_type = spec.device.split(":", 1)[0]
    if device_type not in ("cpu", "cuda"):
        raise PackageError(
            f"the package was compiled for device {spec.device!r}, which this runner does not support (cpu or cuda).",
            kind="device",
        )
    if device_type == "cuda" and not host.cuda_available:
        raise PackageError(
            f"the package was compiled for {spec.device}, but this process has no usable CUDA device. Run it on "
            "a CUDA machine, or re-export with --device cpu.",
            kind="device",
        )
    machine = spec.aoti.get("AOTI_MACHINE", "")
    if machine and machine != host.machine:
        raise PackageError(
            f"the package was compiled for {machine}, but this host is {host.machine}. Re-export the package on "
            "this kind of machine.",
            kind="machine",
        )
    missing = missing_cpu_flags(spec.cpu_flags, host.cpu_flags)
    if missing:
        isa = spec.aoti.get("AOTI_CPU_ISA", "?")
        if spec.cpu_target in ("", "native"):
            problem = f"the package was compiled (with -march=native, AOTI ISA {isa!r}) on a CPU with"
            fix = "Re-export it on a host with these CPU features"
        else:
            problem = f"the package was compiled for CPU target {spec.cpu_target} (AOTI ISA {isa!r}), which needs"
            fix = "Re-export it with --cpu-target native on a host like this one"
        if host.machine == "x86_64":
            fix += ", or with a --cpu-target level this host has (x86-64-v2 < x86-64-v3 < x86-64-v4)"
        raise PackageError(
            f"{problem} {', '.join(missing)}, which this host lacks. Running it could crash with an illegal "
            f"instruction. {fix}.",
            kind="cpu_flags",
        )
    if spec.python_only_ops and not host.python:
        raise PackageError(
            f"the package calls {', '.join(spec.python_only_ops)}, which only Python can run (export_compile "
            "wrote it with --allow-python-ops, for the Python runtime only). This runner has no Python.\nRun it "
            "with run_inference, or define the ops in C++ (TORCH_LIBRARY in an op library) and re-export without "
            "--allow-python-ops.",
            kind="python_only",
        )


def check_required_symbols(spec: PackageSpec, host: HostFacts) -> None:
    """Raise PackageError (kind missing_symbols) naming each op (with its overload) or
    class the package calls that nothing in this process registered, and where it
    comes from: an op library to pass, or a module to import for Python-only ops."""
    missing = [(f"op {op}", op.name) for op in spec.required_ops
               if op.name not in spec.python_only_ops and not host.has_op(op)]
    missing += [(f"class {cls}", cls) for cls in spec.required_classes if not host.has_class(cls)]
    missing_python = [f"op {op}" for op in spec.required_ops if op.name in spec.python_only_ops and not host.has_op(op)]
    problems = []
    if missing:
        problems.append(missing_libraries_message(spec, missing))
    if missing_python:
        modules = ", ".join(spec.fake_modules) or "the module that defines them"
        problems.append(
            f"the package needs the Python-only {' and '.join(missing_python)}, which nothing in this process "
            f"defined. Import {modules} with --fake-module."
        )
    if problems:
        raise PackageError("\n".join(problems), kind="missing_symbols")


def missing_libraries_message(spec: PackageSpec, missing: list[tuple[str, str]]) -> str:
    """What no loaded library registers, grouped by the library that defines it:
    ``missing`` holds (what, qualified name) pairs such as ("op my_ops::op", "my_ops::op").
    cpp_runtime/core/preflight.cpp writes the same words."""
    groups: dict[str, list[str]] = {}
    for what, qualname in missing:
        namespace = qualname.split("::")[0]
        owners = [library for library, spaces in spec.op_library_namespaces.items() if namespace in spaces]
        if owners:
            where = " or ".join(owners)
        elif spec.op_libraries:
            where = ("one of " if len(spec.op_libraries) > 1 else "") + ", ".join(spec.op_libraries)
        else:
            where = "an op library the package does not name"
        groups.setdefault(where, []).append(what)
    needs = "; ".join(f"{' and '.join(whats)}, defined in {where}" for where, whats in groups.items())
    return (
        f"no loaded library registers what the package needs: {needs}. Pass each library's path after the "
        "package or with --op-lib."
    )


def preflight(spec: PackageSpec, host: HostFacts) -> None:
    """Both checks in order (the op libraries must be loaded already)."""
    check_runs_here(spec, host)
    check_required_symbols(spec, host)
