"""Portable CPU targets (export_compile --cpu-target): the compiled model library holds
no instruction beyond the chosen x86-64 psABI level (read back with objdump), the
package records the level's flags and both runners check only those, and every
target's package gives eager's bits."""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import edit_spec, run_cpp_runtime, run_python_runtime
from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.errors import InputError
from aoti_deploy.models.identity import IdentityModel
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.host import host_cpu_flags
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import compare_bits
from aoti_deploy.verify.special_values import special_values

SHAPE = (2, 3, 16, 16)
# The psABI levels' features in /proc/cpuinfo's names, written out here rather than
# taken from the code under test.
V2_FLAGS = {"cmov", "cx8", "fpu", "fxsr", "mmx", "sse", "sse2", "cx16", "lahf_lm", "pni", "popcnt", "sse4_1",
            "sse4_2", "ssse3"}
V3_FLAGS = V2_FLAGS | {"abm", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "xsave"}
V4_FLAGS = V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
LEVEL_FLAGS = {"x86-64-v2": V2_FLAGS, "x86-64-v3": V3_FLAGS, "x86-64-v4": V4_FLAGS}
HOST_FLAGS = host_cpu_flags()


def _host_lacks(target: str) -> list[str]:
    return sorted(LEVEL_FLAGS[target] - HOST_FLAGS)


def _target_param(target: str):
    lacks = _host_lacks(target)
    reason = f"this host lacks {', '.join(lacks)}, so a {target} package cannot be verified here"
    return pytest.param(target, marks=pytest.mark.skipif(bool(lacks), reason=reason), id=target)


TARGETS = [_target_param(target) for target in LEVEL_FLAGS]
# The levels compiled in the suite: the narrowest (scalar kernels, no AVX) and the
# widest. x86-64-v3 takes the same -march path; its ISA cap is checked without a
# compile (test_vector_isa_is_capped_at_the_target).
COMPILED = ("x86-64-v2", "x86-64-v4")
BUILT_TARGETS = [_target_param(target) for target in COMPILED]


@pytest.fixture(scope="module")
def target_packages(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> dict[str, Path]:
    """One IdentityModel package per target this host can run, each by export_compile."""
    out = tmp_path_factory.mktemp("cpu_targets")
    packages = {}
    for target in COMPILED:
        if _host_lacks(target):
            continue
        package = out / f"{target}.pt2"
        result = CliRunner().invoke(export_compile_app, [
            "--cpu-target", target, "--batch", str(SHAPE[0]), "--height", str(SHAPE[2]), "--width", str(SHAPE[3]),
            "--output", str(package), "--op-lib", str(op_library), "--no-show-graph",
        ])
        assert result.exit_code == 0, result.output
        assert f"cpu target │ {target}" in re.sub(r" +", " ", result.output), result.output
        packages[target] = package
    return packages


def _disassembly(package: Path, tmp: Path) -> str:
    """objdump -d of the package's compiled model library (binutils)."""
    with zipfile.ZipFile(package) as archive:
        libraries = [name for name in archive.namelist() if name.endswith(".so")]
        assert len(libraries) == 1, libraries
        library = Path(archive.extract(libraries[0], tmp))
    result = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True, text=True,
                            check=True)
    assert len(result.stdout.splitlines()) > 1000, "the model library disassembled to almost nothing"
    return result.stdout


def _instructions(text: str, pattern: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.search(pattern, line)]


# Instructions past each level, beyond what the register names show: VEX encodings
# (AVX and later; every VEX/EVEX mnemonic starts with "v"), BMI1/2, LZCNT and MOVBE (v3),
# EVEX-only registers and AVX-512VL mnemonics on xmm/ymm (v4), and the extensions
# Inductor's own ISAs would add on this host (VNNI, BF16, AMX).
_BEYOND_V2 = r"^\s*[0-9a-f]+:\s+v[a-z]|\b(andn|bextr|bls\w+|bzhi|lzcnt|tzcnt|movbe|pdep|pext|sarx|shlx|shrx|rorx)\b"
_BEYOND_V3 = (r"%[xyz]mm(1[6-9]|2\d|3[01])\b|%zmm\d|%k[0-7]\b|\b(vpternlog\w+|vpermt2\w+|vpermi2\w+|vcvt\w*2u?qq|"
              r"vcvtu?qq2\w+|vprol\w+|vpror\w+|vpmov[qdw][bwd]\w*|vpcompress\w+|vpexpand\w+)\b")
_BEYOND_V4 = r"\b(vpdpbusds?|vpdpwssds?|vdpbf16ps|vcvtneps2bf16|vcvtne2ps2bf16|tdp\w+|tileloadd\w*|ldtilecfg)\b"


@pytest.mark.parametrize("target", BUILT_TARGETS)
def test_compiled_code_stays_within_the_target(target, target_packages, tmp_path):
    code = _disassembly(target_packages[target], tmp_path)
    beyond = {"x86-64-v2": [_BEYOND_V2, _BEYOND_V3, _BEYOND_V4], "x86-64-v4": [_BEYOND_V4]}[target]
    for pattern in beyond:
        found = _instructions(code, pattern)
        assert not found, f"{target}: {len(found)} instructions beyond the level, e.g. {found[:5]}"
    # Each level does use what it allows (so the patterns above can match at all).
    if target == "x86-64-v4":
        assert _instructions(code, r"%zmm\d"), "an AVX-512 target should vectorize with 512-bit registers"


def test_native_code_uses_the_host_s_widest_vectors(compiled_package, tmp_path):
    """The contrast that gives the checks above their meaning: -march=native on an
    AVX-512 host does emit zmm instructions."""
    if "avx512f" not in HOST_FLAGS:
        pytest.skip("this host has no AVX-512, so native code has no zmm to find")
    assert _instructions(_disassembly(compiled_package.path, tmp_path), r"%zmm\d")


@pytest.mark.parametrize("target", BUILT_TARGETS)
def test_package_records_the_level_not_the_host(target, target_packages):
    spec = read_package_spec(target_packages[target])
    assert spec.cpu_target == target
    assert set(spec.cpu_flags) == LEVEL_FLAGS[target]


def test_native_package_records_native_and_the_host_s_flags(compiled_package):
    spec = read_package_spec(compiled_package.path)
    assert spec.cpu_target == "native"
    assert "sse2" in spec.cpu_flags and set(spec.cpu_flags) <= HOST_FLAGS
    assert not {"hypervisor", "tsc"} & set(spec.cpu_flags), "flags that name no instructions are not required"


@pytest.mark.parametrize("target", BUILT_TARGETS)
def test_every_target_gives_eager_s_bits_in_both_runtimes(target, target_packages, build, op_library, tmp_path):
    """Against eager, not the inputs: the fused multiply quiets signaling NaNs, in
    eager as in the package, so the identity check of the runners fails on those
    (exit 1), while every bit still matches eager's."""
    package = target_packages[target]
    for name, x in (("random", torch.randn(SHAPE, generator=torch.Generator().manual_seed(3))),
                    ("special", special_values(SHAPE, torch.float32, seed=5))):
        with torch.no_grad():
            eager = IdentityModel(SHAPE[1]).eval()(x)
        inputs = save_tensors(tmp_path / f"{name}_in.pt", [x])
        for runtime, (code, output) in (
            ("python", run_python_runtime(package, op_library, inputs, tmp_path / f"{name}_py.pt")),
            ("c++", run_cpp_runtime(build.runner, package, op_library, inputs, tmp_path / f"{name}_cpp.pt")),
        ):
            assert code == 0 or (name == "special" and code == 1 and "identity: FAILED" in output), output
            out = torch.load(tmp_path / f"{name}_{'py' if runtime == 'python' else 'cpp'}.pt")[0]
            report = compare_bits(out, eager)
            assert report.identical, f"{target} {name} {runtime}: {report}"


def test_runners_check_the_target_s_flags_and_name_the_target(target_packages, build, op_library, tmp_path):
    """A package whose level needs a flag this host lacks is refused by both runners
    before anything loads, with the target, the flag and the fix named."""
    source = next(iter(target_packages.values()), None)
    if source is None:
        pytest.skip("no portable target runs on this host")
    spec = read_package_spec(source)
    crafted = edit_spec(source, tmp_path / "future.pt2", cpu_target="x86-64-v9",
                        cpu_flags=[*spec.cpu_flags, "avx10_future"])
    for code, output in (run_python_runtime(crafted, op_library, None, tmp_path / "py.pt"),
                         run_cpp_runtime(build.runner, crafted, op_library, None, tmp_path / "cpp.pt")):
        assert code != 0, output
        assert "compiled for CPU target x86-64-v9" in output, output
        assert "avx10_future, which this host lacks" in output, output
        assert "--cpu-target native on a host like this one" in output, output
        if "lm" in HOST_FLAGS:
            assert "a --cpu-target level this host has (x86-64-v2 < x86-64-v3 < x86-64-v4)" in output, output


def test_a_native_package_from_another_cpu_points_to_cpu_target(compiled_package, build, op_library, tmp_path):
    spec = read_package_spec(compiled_package.path)
    crafted = edit_spec(compiled_package.path, tmp_path / "other_host.pt2", cpu_flags=[*spec.cpu_flags, "avx10_future"])
    for code, output in (run_python_runtime(crafted, op_library, None, tmp_path / "py.pt"),
                         run_cpp_runtime(build.runner, crafted, op_library, None, tmp_path / "cpp.pt")):
        assert code != 0 and "with -march=native" in output, output
        assert "Re-export it on a host with these CPU features, or with a --cpu-target level" in output, output


def test_unknown_or_unrunnable_targets_are_refused_before_the_build(tmp_path, op_library):
    from aoti_deploy.package.host import check_cpu_target

    result = CliRunner().invoke(export_compile_app, ["--cpu-target", "x86-64-v5", "--output", str(tmp_path / "m.pt2")])
    assert result.exit_code == 2 and "x86-64-v5" in result.output
    with pytest.raises(InputError, match=r"--cpu-target x86-64-v4 needs avx512bw, avx512cd, avx512dq, avx512f, "
                                         r"avx512vl, which this host lacks.*choose --cpu-target x86-64-v3 or lower"):
        check_cpu_target("x86-64-v4", host_flags=V3_FLAGS)
    with pytest.raises(InputError, match="this host is not x86-64; use --cpu-target native"):
        check_cpu_target("x86-64-v2", host_flags={"fp", "asimd"})
    assert not (tmp_path / "m.pt2").exists()


def test_onnx_refuses_a_cpu_target(tmp_path):
    result = CliRunner().invoke(export_compile_app, ["onnx", "--cpu-target", "x86-64-v3",
                                                      "--output", str(tmp_path / "m.onnx")])
    assert result.exit_code == 2, result.output
    assert "--cpu-target applies to .pt2 packages" in result.output


def _gcc_enabled_options(level: str) -> set[str]:
    """gcc's own list of the -m options -march=<level> enables: the oracle."""
    out = subprocess.run(["g++", f"-march={level}", "-Q", "--help=target"], capture_output=True, text=True,
                         check=True).stdout
    return {parts[0] for parts in (line.split() for line in out.splitlines())
            if len(parts) == 2 and parts[0].startswith("-m") and parts[1] == "[enabled]"}


@pytest.mark.parametrize("target", TARGETS)
def test_vector_isa_is_capped_at_the_target(target):
    """Within the compile, Inductor's picked ISA needs only options gcc enables for the
    level, and it compiles with -march=<level>. On an AVX-512 VNNI/BF16 host it would
    otherwise add -mavx512vnni or -mavx512bf16."""
    from torch._inductor import config, cpp_builder, cpu_vec_isa

    from aoti_deploy.compiler.cpu_target import compiling_for

    before = cpu_vec_isa.valid_vec_isa_list
    with compiling_for(target) as settings, config.patch(settings):
        isa = cpu_vec_isa.pick_vec_isa()
        options = set(isa.build_arch_flags().split()) if isa else set()
        assert options <= _gcc_enabled_options(target), options - _gcc_enabled_options(target)
        assert cpp_builder._get_cpu_arch_cflags(cpp_builder.get_cpp_compiler()) == [f"march={target}"]
        if target == "x86-64-v2":
            assert not isa, "Inductor has no 128-bit x86 ISA: v2 kernels are scalar"
        else:
            assert isa.bit_width() == {"x86-64-v3": 256, "x86-64-v4": 512}[target]
    assert cpu_vec_isa.valid_vec_isa_list is before
    with compiling_for("native") as settings:
        assert settings == {}


def test_a_torch_that_breaks_the_cap_fails_the_compile(monkeypatch):
    """If Inductor picks an ISA past the level anyway, or lacks the internals the cap
    uses, or records another ISA in the package, the compile fails with a CompileError
    that says so, and the ISA list is restored."""
    from torch._inductor import cpu_vec_isa

    from aoti_deploy.compiler.cpu_target import check_compiled_isa, compiling_for
    from aoti_deploy.errors import CompileError

    before = cpu_vec_isa.valid_vec_isa_list
    monkeypatch.setattr(cpu_vec_isa, "pick_vec_isa", lambda: cpu_vec_isa.VecAVX512VNNI())
    with pytest.raises(CompileError, match="picks vector ISA 'avx512 avx512_vnni', expected 'AVX2'"):
        with compiling_for("x86-64-v3"):
            pass
    monkeypatch.undo()
    monkeypatch.delattr(cpu_vec_isa, "VecAVX2")
    with pytest.raises(CompileError, match=r"needs Inductor internals that torch .* does not have"):
        with compiling_for("x86-64-v3"):
            pass
    monkeypatch.undo()
    assert cpu_vec_isa.valid_vec_isa_list is before
    with pytest.raises(CompileError, match=r"records vector ISA 'AVX512 AVX512_VNNI', expected 'AVX512'"):
        check_compiled_isa("x86-64-v4", {"AOTI_CPU_ISA": "AVX512 AVX512_VNNI"}, Path("m.pt2"))
    check_compiled_isa("x86-64-v4", {"AOTI_CPU_ISA": "AVX512"}, Path("m.pt2"))
