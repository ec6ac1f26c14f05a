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
from identity_conv.cli.export_compile import app as export_compile_app
from identity_conv.errors import InputError
from identity_conv.models.identity import IdentityModel
from identity_conv.package.archive import read_package_spec
from identity_conv.package.host import host_cpu_flags
from identity_conv.runtime.tensor_files import save_tensors
from identity_conv.verify.bits import compare_bits
from identity_conv.verify.special_values import special_values

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


@pytest.fixture(scope="module")
def target_packages(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> dict[str, Path]:
    """One IdentityModel package per target this host can run, each by export_compile."""
    out = tmp_path_factory.mktemp("cpu_targets")
    packages = {}
    for target in LEVEL_FLAGS:
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


@pytest.mark.parametrize("target", TARGETS)
def test_compiled_code_stays_within_the_target(target, target_packages, tmp_path):
    code = _disassembly(target_packages[target], tmp_path)
    # AVX and later use ymm (256-bit) registers; AVX-512 zmm and the %k mask registers.
    ymm, zmm, masks = (_instructions(code, pattern) for pattern in (r"%ymm\d", r"%zmm\d", r"%k[0-7]\b"))
    # Extensions beyond x86-64-v4 that Inductor's vector ISAs would add on this host.
    beyond_v4 = _instructions(code, r"\b(vpdpbusds?|vpdpwssds?|vdpbf16ps|vcvtneps2bf16|vcvtne2ps2bf16|tdp\w+|tileloadd)\b")
    if target == "x86-64-v2":
        assert not ymm and not zmm and not masks, (ymm + zmm + masks)[:5]
    if target == "x86-64-v3":
        assert not zmm and not masks, (zmm + masks)[:5]
        assert ymm, "an AVX2 target should vectorize the fused multiply with 256-bit registers"
    if target == "x86-64-v4":
        assert zmm, "an AVX-512 target should vectorize with 512-bit registers"
    assert not beyond_v4, beyond_v4[:5]


def test_native_code_uses_the_host_s_widest_vectors(compiled_package, tmp_path):
    """The contrast that gives the checks above their meaning: -march=native on an
    AVX-512 host does emit zmm instructions."""
    if "avx512f" not in HOST_FLAGS:
        pytest.skip("this host has no AVX-512, so native code has no zmm to find")
    assert _instructions(_disassembly(compiled_package.path, tmp_path), r"%zmm\d")


@pytest.mark.parametrize("target", TARGETS)
def test_package_records_the_level_not_the_host(target, target_packages):
    spec = read_package_spec(target_packages[target])
    assert spec.cpu_target == target
    assert set(spec.cpu_flags) == LEVEL_FLAGS[target]


def test_native_package_records_native_and_the_host_s_flags(compiled_package):
    spec = read_package_spec(compiled_package.path)
    assert spec.cpu_target == "native"
    assert "sse2" in spec.cpu_flags and set(spec.cpu_flags) <= HOST_FLAGS
    assert not {"hypervisor", "tsc"} & set(spec.cpu_flags), "flags that name no instructions are not required"


@pytest.mark.parametrize("target", TARGETS)
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
        assert "lower --cpu-target" in output, output


def test_a_native_package_from_another_cpu_points_to_cpu_target(compiled_package, build, op_library, tmp_path):
    spec = read_package_spec(compiled_package.path)
    crafted = edit_spec(compiled_package.path, tmp_path / "other_host.pt2", cpu_flags=[*spec.cpu_flags, "avx10_future"])
    code, output = run_cpp_runtime(build.runner, crafted, op_library, None, tmp_path / "cpp.pt")
    assert code != 0 and "with -march=native" in output and "--cpu-target" in output, output


def test_unknown_or_unrunnable_targets_are_refused_before_the_build(tmp_path, op_library):
    from identity_conv.compiler.cpu_target import check_cpu_target

    result = CliRunner().invoke(export_compile_app, ["--cpu-target", "x86-64-v5", "--output", str(tmp_path / "m.pt2")])
    assert result.exit_code == 2 and "x86-64-v5" in result.output
    with pytest.raises(InputError, match=r"--cpu-target x86-64-v4 needs avx512bw, avx512cd, avx512dq, avx512f, "
                                         r"avx512vl, which this host lacks.*choose --cpu-target x86-64-v3 or lower"):
        check_cpu_target("x86-64-v4", host_flags=V3_FLAGS)
    with pytest.raises(InputError, match="choose --cpu-target native"):
        check_cpu_target("x86-64-v2", host_flags={"fp", "asimd"})
    assert not (tmp_path / "m.pt2").exists()


def test_onnx_refuses_a_cpu_target(tmp_path):
    result = CliRunner().invoke(export_compile_app, ["onnx", "--cpu-target", "x86-64-v3",
                                                      "--output", str(tmp_path / "m.onnx")])
    assert result.exit_code == 2, result.output
    assert "--cpu-target applies to .pt2 packages" in result.output


def test_vector_isa_is_capped_at_the_target():
    """Within the compile, Inductor sees only vector ISAs the target allows, and none
    with flags beyond it (on an AVX-512 VNNI/BF16 host it would add -mavx512vnni)."""
    from torch._inductor import config, cpu_vec_isa

    from identity_conv.compiler.cpu_target import compiling_for

    if "avx512f" not in HOST_FLAGS:
        pytest.skip("this host has no AVX-512")
    before = cpu_vec_isa.valid_vec_isa_list
    expected = {"x86-64-v2": ("INVALID_VEC_ISA", ""), "x86-64-v3": ("avx2", "-mavx2 -mfma -mf16c"),
                "x86-64-v4": ("avx512", "-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma")}
    for target, (name, flags) in expected.items():
        with compiling_for(target) as settings, config.patch(settings):
            isa = cpu_vec_isa.pick_vec_isa()
            assert str(isa).upper() == name.upper()
            assert (isa.build_arch_flags() if isa else "") == flags
            assert settings["cpp.march"] == target
    assert cpu_vec_isa.valid_vec_isa_list is before
    with compiling_for("native") as settings:
        assert settings == {}
