"""Cold start: run_inference loads packages straight on torch's C++ loader (the same
bits and errors as aoti_load_package, a clear error without the binding), imports neither Dynamo
nor Inductor to run one, nor torch for --help; the CLIs end without teardown yet leave
nothing behind; and the benchmark's cold-start section. No timing is asserted here:
speed is the benchmark's job."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import Build, _export, run_cmd
from aoti_deploy.bench.benchmark import BenchReport
from aoti_deploy.bench.benchmark_report import markdown_table, targets
from aoti_deploy.bench.cold_start import ColdStartResult, ProcessTiming, measure_cold_start
from aoti_deploy.errors import AotiDeployError, PackageError
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.runtime import aoti
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
from aoti_deploy.verify.bits import compare_bits

RUN_INFERENCE = Path(sys.executable).parent / "run_inference"
AOTI_DEPLOY = Path(sys.executable).parent / "aoti-deploy"
# Modules a run must not import: the compiler stacks aoti_load_package pulls in, and
# the ONNX side, which only .onnx paths need.
NOT_FOR_A_RUN = ("torch._dynamo", "torch._inductor", "aoti_deploy.compiler.onnx_export", "onnx", "onnxruntime")


def _export_to(out: Path, *args: str) -> Path:
    package = out / "model.pt2"
    code, output = _export([*args, "--output", str(package)])
    assert code == 0, output
    return package


@pytest.fixture(scope="module")
def demo_package(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> Path:
    """The demo package of README and scripts/demo.sh: the IdentityModel, 1x3x224x224 float32."""
    return _export_to(tmp_path_factory.mktemp("demo"), "--op-lib", str(op_library))


@pytest.fixture(scope="module")
def nested_package(pair) -> Path:
    """Two inputs, a dict output holding a list: conftest's pair package."""
    return pair.path


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for this test: where the C++ loader extracts packages (and where a failed
    load leaves its folder, torch's behaviour), kept out of the shared /tmp."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def _same_structure_and_bits(ours: object, theirs: object) -> None:
    leaves, spec = torch.utils._pytree.tree_flatten(ours)
    their_leaves, their_spec = torch.utils._pytree.tree_flatten(theirs)
    assert spec == their_spec
    assert all(compare_bits(a, b).identical for a, b in zip(leaves, their_leaves, strict=True))


def _corrupt_model_library(source: Path, target: Path) -> Path:
    """A copy of ``source`` whose compiled model library is zeros: the spec reader's
    ELF check refuses it, and the loader fails at dlopen."""
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(target, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith(".wrapper.so"):
                data = bytes(len(data))
            zout.writestr(zipfile.ZipInfo(info.filename, info.date_time), data)
    return target


# --- the loader: the same bits and errors as aoti_load_package -------------------------

def test_the_direct_loader_is_used_and_gives_aoti_load_package_bits(demo_package, private_tmp):
    assert aoti.package_loader_class() is torch._C._aoti.AOTIModelPackageLoader
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    ours = aoti.load_compiled(demo_package)
    assert isinstance(ours, aoti.CompiledPackage)
    theirs = torch._inductor.aoti_load_package(str(demo_package))
    _same_structure_and_bits(ours(x), theirs(x))
    assert compare_bits(ours(x), x).identical
    assert ours.get_metadata() == theirs.get_metadata()


def test_nested_outputs_keep_their_structure_and_bits(nested_package, private_tmp):
    generator = torch.Generator().manual_seed(5)
    x, y = torch.randn(7, 5, generator=generator), torch.randn(7, 5, generator=generator)
    ours = aoti.load_compiled(nested_package)(x, y)
    theirs = torch._inductor.aoti_load_package(str(nested_package))(x, y)
    assert isinstance(ours, dict) and isinstance(ours["parts"], list)
    _same_structure_and_bits(ours, theirs)
    # LoadedPackage hands the runners the flat list, in pytree order.
    package = aoti.load_package(nested_package, read_package_spec(nested_package))
    flat = package.run([x, y])
    assert len(flat) == 3 and all(compare_bits(a, b).identical
                                  for a, b in zip(flat, torch.utils._pytree.tree_leaves(theirs)))


def test_keyword_inputs_are_refused_as_aoti_load_package_refuses_them(demo_package, private_tmp):
    x = torch.randn(1, 3, 224, 224)
    ours, theirs = aoti.load_compiled(demo_package), torch._inductor.aoti_load_package(str(demo_package))
    errors = []
    for model in (ours, theirs):
        with pytest.raises(ValueError) as error:
            model(x, extra=x)
        errors.append(str(error.value))
    assert errors[0] == errors[1] and "kwarg keyword mismatch" in errors[0]


def _load_error(path: Path, spec: object) -> str:
    with pytest.raises(PackageError) as error:
        aoti.LoadedPackage(path, spec)  # type: ignore[arg-type]
    return re.sub(r"aotinductor_\w+", "aotinductor_*", str(error.value))


def test_an_unloadable_package_gives_aoti_load_package_s_error(demo_package, tmp_path, private_tmp):
    broken = _corrupt_model_library(demo_package, tmp_path / "broken.pt2")
    # Reading the spec refuses it before torch's loader sees it...
    with pytest.raises(PackageError, match="is not a complete shared library for this machine"):
        read_package_spec(broken)
    # ... and the loader, reached past that check, fails as aoti_load_package does.
    ours = _load_error(broken, read_package_spec(demo_package))
    with pytest.raises(RuntimeError) as theirs:
        torch._inductor.aoti_load_package(str(broken))
    first_line = re.sub(r"aotinductor_\w+", "aotinductor_*", str(theirs.value).strip().splitlines()[0])
    assert ours == f"could not load the AOTI package {broken}: {first_line}"
    assert "invalid ELF header" in ours


def test_a_torch_that_cannot_load_packages_from_python_gets_a_clear_error(demo_package, build, private_tmp,
                                                                          monkeypatch):
    """aoti_load_package builds the same loader, so there is nothing to fall back to:
    without the binding, a PackageError (exit 2) that says what is missing and to use
    aoti_runner, not an AttributeError."""
    from aoti_deploy.cli.run_inference import app as run_inference_app

    monkeypatch.delattr(torch._C._aoti, "AOTIModelPackageLoader")
    with pytest.raises(PackageError, match=r"cannot load AOTInductor packages from Python.*aoti_runner"):
        aoti.load_compiled(demo_package)
    result = CliRunner().invoke(run_inference_app, [str(demo_package), str(build.op_library)])
    assert result.exit_code == 2, result.output
    assert "cannot load AOTInductor packages from Python" in result.output


def test_a_closed_package_removes_its_files_and_refuses_to_run(demo_package, private_tmp):
    package = aoti.load_package(demo_package, read_package_spec(demo_package))
    assert any(private_tmp.iterdir())  # the loader's extracted package
    with package:
        pass
    assert not any(private_tmp.iterdir())
    with pytest.raises(PackageError, match="was closed"):
        package.run([torch.randn(1, 3, 224, 224)])


# --- what the processes import, and what they leave behind -----------------------------

def _imported(stderr: str) -> set[str]:
    """Module names in -X importtime output."""
    return {line.split("|")[2].strip() for line in stderr.splitlines() if line.startswith("import time:")} - {"package"}


def _profiled_env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "TMPDIR": str(tmp)}
    env.pop("AOTI_DEPLOY_TRUSTED_KEY", None)
    return env


def test_run_inference_imports_no_compiler_and_leaves_nothing_behind(demo_package, build, tmp_path):
    """The real console script, in its own process: a verified run that imports
    neither Dynamo nor Inductor nor anything ONNX, and whose loader folder is gone even
    though the process ends without Python's teardown."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    inputs = save_tensors(tmp_path / "in.pt", [torch.randn(1, 3, 224, 224)])
    result = subprocess.run([RUN_INFERENCE, demo_package, build.op_library, "--inputs", inputs,
                             "--outputs", tmp_path / "out.pt"], capture_output=True, text=True, timeout=300,
                            env=_profiled_env(temp))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("PASSED")
    imported = _imported(result.stderr)
    assert "torch" in imported  # the profile is there
    assert not [name for name in imported if name.startswith(NOT_FOR_A_RUN)]
    assert compare_bits(load_tensors(tmp_path / "out.pt")[0], load_tensors(inputs)[0]).identical
    assert not any(temp.iterdir())


@pytest.mark.parametrize("command", [[RUN_INFERENCE], [AOTI_DEPLOY, "run"]],
                         ids=["run_inference", "aoti-deploy run"])
def test_run_inference_help_imports_no_torch(tmp_path, command):
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120,
                            env=_profiled_env(tmp_path))
    assert result.returncode == 0 and "Usage" in result.stdout and "--trusted-key" in result.stdout
    imported = _imported(result.stderr)
    assert "aoti_deploy.cli.run_inference" in imported
    assert not [name for name in imported if name == "torch" or name.startswith(("torch.", "numpy"))]
    # aoti-deploy run loads no other subcommand's module.
    assert not [name for name in imported if name.startswith("aoti_deploy.cli.") and
                name.rsplit(".", 1)[1] not in ("run_inference", "common")]


def test_run_inference_exit_codes_survive_the_fast_exit(demo_package, tmp_path):
    missing = run_cmd(RUN_INFERENCE, tmp_path / "absent.pt2")
    assert missing.returncode == 2 and "package not found" in missing.stderr
    usage = run_cmd(RUN_INFERENCE, demo_package, "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_the_package_imports_torch_only_when_its_ops_are_used():
    code = (
        "import sys, aoti_deploy\n"
        "from aoti_deploy.runtime import is_onnx_path\n"
        "import aoti_deploy.cli.common\n"
        "print('torch' in sys.modules)\n"
        "from aoti_deploy import identity_conv, load_op_library, PackageError\n"
        "print('torch' in sys.modules, callable(identity_conv), callable(load_op_library))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False", "True True True"]


def test_aoti_runner_ends_fast_with_its_outputs_written_and_nothing_left(demo_package, build: Build, tmp_path):
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    inputs = save_tensors(tmp_path / "in.pt", [torch.randn(1, 3, 224, 224)])
    result = subprocess.run([build.runner, demo_package, build.op_library, "--inputs", inputs, "--outputs",
                             tmp_path / "out.pt"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("PASSED")  # flushed before the process ended
    assert compare_bits(load_tensors(tmp_path / "out.pt")[0], load_tensors(inputs)[0]).identical
    assert not any(temp.iterdir())
    usage = run_cmd(build.runner, "--help")
    assert usage.returncode == 0 and usage.stdout.rstrip().endswith("aoti_runner artifacts/bundle --trusted-key keys/signing.pub")


# --- the benchmark's cold-start section ---------------------------------------------------

def test_measure_cold_start_runs_each_command_and_checks_it_passed(demo_package, build, tmp_path):
    result = measure_cold_start(demo_package, build.op_library, build.runner, runs=1)
    assert [t.name for t in result.timings] == ["aoti_runner", "run_inference", "run_inference --help"]
    for timing in result.timings:
        assert timing.runs == 1 and timing.min_ms == timing.median_ms > 0 and timing.peak_rss_mb > 0
    # Each peak is the command's own, not this (torch-holding) process's: --help holds no torch.
    assert result.run_inference_help.peak_rss_mb < result.aoti_runner.peak_rss_mb < result.run_inference.peak_rss_mb
    with pytest.raises(AotiDeployError, match="failed with exit 2"):
        measure_cold_start(tmp_path / "absent.pt2", build.op_library, build.runner, runs=1)


def _timing(name: str, ms: float) -> ProcessTiming:
    return ProcessTiming(name, [name], ms, ms * 0.9, 100.0, 7, [ms] * 7)


@pytest.mark.parametrize("runner_ms, python_ms, help_ms, met", [
    (200, 1500, 300, [True, True, True]),
    (300, 2200, 600, [False, False, False]),
    (100, 1500, 300, [True, True, True]),  # 15x: the ratio is reported, not a target
])
def test_cold_start_in_the_report_targets_and_markdown(runner_ms, python_ms, help_ms, met):
    report = BenchReport({"cpu": "test", "cores": "2"}, torch.__version__, 1.0, True, 1)
    report.cold_start = ColdStartResult("model.pt2", _timing("aoti_runner", runner_ms),
                                        _timing("run_inference", python_ms), _timing("run_inference --help", help_ms))
    found = [t for t in targets(report) if t.name.startswith("cold start")]
    assert [t.met for t in found] == met
    assert "aoti_runner <= 0.25 s" in found[0].name and "run_inference <= 2 s" in found[1].name
    assert "run_inference --help <= 0.5 s" in found[2].name
    assert report.to_json()["cold_start"]["ratio"] == pytest.approx(python_ms / runner_ms)
    markdown = markdown_table(report)
    assert f"| run_inference | {python_ms} |" in markdown and f"| {python_ms / runner_ms:.1f}x |" in markdown
