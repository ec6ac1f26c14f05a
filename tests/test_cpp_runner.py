"""The C++ runner build/aoti_runner, driven as a subprocess: same bits as the
Python runtime, and a clear message with exit 2 for every usage or load error."""

from __future__ import annotations

import os

import zipfile

import pytest
import torch

from conftest import run_cmd
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
from aoti_deploy.verify.bits import compare_bits


@pytest.fixture(scope="module")
def python_output(compiled_package):
    from aoti_deploy.package.archive import read_package_spec
    from aoti_deploy.runtime.aoti import load_package

    package = load_package(compiled_package.path, read_package_spec(compiled_package.path))
    return package.run(load_tensors(compiled_package.input_file))


def test_runner_output_file_is_bit_identical_to_python_runtime(build, compiled_package, python_output, tmp_path):
    out = tmp_path / "cpp_out.pt"
    result = run_cmd(build.runner, compiled_package.path, build.op_library,
                     "--inputs", compiled_package.input_file, "--outputs", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: output[0] vs input[0] (bitwise): identical" in result.stdout
    assert result.stdout.strip().endswith("PASSED")
    cpp_output = load_tensors(out)
    assert len(cpp_output) == 1
    assert compare_bits(cpp_output[0], python_output[0]).identical
    assert compare_bits(cpp_output[0], compiled_package.inputs[0]).identical


def test_a_package_run_at_another_thread_count_is_said_in_both_runtimes(build, compiled_package, tmp_path):
    """The package records the intra-op thread count it was compiled for (its weights'
    layout); both runtimes run at their own count (OMP_NUM_THREADS here) and, when it
    differs, say so in the same words, with the export flag that fixes it."""
    from conftest import run_cli
    from aoti_deploy.package.archive import read_package_spec

    compiled = read_package_spec(compiled_package.path).intra_op_threads
    assert compiled >= 1
    other = 1 if compiled > 1 else 2  # torch caps OMP_NUM_THREADS at the CPUs this process may use
    note = (f"note: this package was compiled for {compiled} intra-op thread(s) and runs at {other}: oneDNN "
            f"laid any convolution weights it holds out for {compiled}")
    fix = f"To run at {other}, export with --threads {other} (threads={other})."
    lines = {}
    for threads in (compiled, other):
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        cpp = run_cmd(build.runner, compiled_package.path, build.op_library, "--seed", "3", env=environment)
        python = run_cli("run_inference", compiled_package.path, "--seed", "3", cwd=tmp_path, build=build,
                         OMP_NUM_THREADS=str(threads))
        for name, result in (("cpp", cpp), ("python", python)):
            assert result.returncode == 0 and "PASSED" in result.stdout, result.stdout + result.stderr
            lines[name, threads] = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert lines["cpp", compiled] == lines["python", compiled] == []
    assert lines["cpp", other] == lines["python", other], lines
    (shown,) = lines["cpp", other]
    assert shown.startswith(note) and shown.endswith(fix), shown


def test_runner_with_random_input_passes(build, compiled_package):
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "input: random (seed 3)" in result.stdout and "PASSED" in result.stdout


def test_runner_accepts_a_non_contiguous_input(build, compiled_package, tmp_path):
    x = torch.randn(2, 3, 12, 8).transpose(2, 3)
    inputs = save_tensors(tmp_path / "in.pt", [x])
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--inputs", inputs,
                     "--outputs", tmp_path / "out.pt")
    assert result.returncode == 0, result.stderr
    assert compare_bits(load_tensors(tmp_path / "out.pt")[0], x.contiguous()).identical


def test_mismatch_exits_1_with_a_bit_report(build, compiled_package, tmp_path):
    # A package is an identity; a -0.0 input meets the native conv, which yields +0.0.
    x = torch.randn(2, 3, 8, 12)
    x[0, 1, 2, 3] = -0.0
    inputs = save_tensors(tmp_path / "in.pt", [x])
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--inputs", inputs)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 of 576 elements differ; first at [0, 1, 2, 3]: got 0 (0x00000000), expected -0 (0x80000000)" in result.stdout
    assert result.stdout.strip().endswith("FAILED")


def _write(path, content: bytes):
    path.write_bytes(content)
    return path


def _zip_without_package(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("hello.txt", "not an AOTI package")
    return path


def _truncated(path, compiled_package):
    data = compiled_package.path.read_bytes()
    return _write(path, data[: len(data) // 2])


@pytest.mark.parametrize(
    "make_package, message",
    [
        (lambda p, c: p / "absent.pt2", "package not found"),
        (lambda p, c: _write(p / "empty.pt2", b""), "package is empty"),
        (lambda p, c: _write(p / "text.pt2", b"hello"), "not a zip archive"),
        (lambda p, c: _zip_without_package(p / "other.zip"), "could not read the AOTI package"),
        (lambda p, c: _truncated(p / "half.pt2", c), "could not read the AOTI package"),
    ],
    ids=["missing", "empty", "not-zip", "zip-not-package", "truncated"],
)
def test_bad_packages_exit_2(build, compiled_package, tmp_path, make_package, message):
    package = make_package(tmp_path, compiled_package)
    result = run_cmd(build.runner, package, build.op_library, "--outputs", tmp_path / "out.pt")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "terminate called" not in result.stderr
    assert not (tmp_path / "out.pt").exists()


def _env_without_build_settings(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AOTI_DEPLOY_OPS_LIB", "AOTI_DEPLOY_BUILD_DIR")}
    return {**env, **more}


def test_without_op_library_the_runner_finds_the_recorded_one_beside_itself(build, compiled_package, tmp_path):
    """As run_inference does: the package records libidentity_conv_ops.so, and the
    runner's own folder is the build folder."""
    result = run_cmd(build.runner, compiled_package.path, cwd=tmp_path, env=_env_without_build_settings())
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"loaded op library {build.op_library}" in result.stdout


def test_a_build_folder_set_in_the_environment_is_honoured(build, compiled_package, tmp_path):
    result = run_cmd(build.runner, compiled_package.path, env=_env_without_build_settings(
        AOTI_DEPLOY_OPS_LIB=str(tmp_path / "absent.so")))
    assert result.returncode == 2
    assert f"AOTI_DEPLOY_OPS_LIB is set to {tmp_path / 'absent.so'}, which does not exist" in result.stderr


def test_without_op_library_names_the_missing_op_and_class(build, compiled_package, tmp_path):
    """A build folder without the library: the runner names what the package needs."""
    result = run_cmd(build.runner, compiled_package.path, env=_env_without_build_settings(
        AOTI_DEPLOY_BUILD_DIR=str(tmp_path)))
    assert result.returncode == 2
    assert "op my_ops::identity_conv_op and class my_ops::IdentityConvClass" in result.stderr
    assert "libidentity_conv_ops.so" in result.stderr


def test_wrong_op_library_path(build, compiled_package, tmp_path):
    result = run_cmd(build.runner, compiled_package.path, tmp_path / "missing.so")
    assert result.returncode == 2
    assert f"op library not found: {tmp_path / 'missing.so'}" in result.stderr


def test_a_library_that_is_not_the_op_library(build, compiled_package):
    other = torch.__file__.replace("__init__.py", "lib/libtorch_global_deps.so")
    result = run_cmd(build.runner, compiled_package.path, other)
    assert result.returncode == 2
    assert "no loaded library registers what the package needs: op my_ops::identity_conv_op" in result.stderr


def test_a_file_that_is_not_a_shared_library(build, compiled_package, tmp_path):
    fake = _write(tmp_path / "libfake.so", b"not an ELF file")
    result = run_cmd(build.runner, compiled_package.path, fake)
    assert result.returncode == 2
    assert f"op library {fake} is not a complete shared library for this machine" in result.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        (lambda: [torch.randn(2, 3, 4, 12)], r"input[0] (x): dim 2 expected 8, got 4"),
        (lambda: [torch.randn(2, 3, 8)], "input[0] (x): expected rank 4 [2, 3, 8, 12], got rank 3"),
        (lambda: [torch.randn(2, 3, 8, 12, dtype=torch.float64)], "expected dtype float32, got float64"),
        (lambda: [torch.randn(2, 3, 8, 12)] * 2, "the package expects 1, got 2"),
        (lambda: {"y": torch.randn(2, 3, 8, 12)}, 'missing input(s) x; unknown name(s) "y"'),
        (lambda: [torch.randn(2, 3, 8, 12), 3], "element 1 is of type Int, expected a tensor"),
    ],
    ids=["wrong-dim", "wrong-rank", "wrong-dtype", "two-inputs", "dict", "not-a-tensor"],
)
def test_bad_input_files_exit_2_and_write_nothing(build, compiled_package, tmp_path, content, message):
    inputs = tmp_path / "in.pt"
    torch.save(content(), inputs)
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--inputs", inputs,
                     "--outputs", tmp_path / "out.pt")
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert not (tmp_path / "out.pt").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "missing the package path"),
        (["--bogus"], "unknown option --bogus"),
        (["PKG", "--inputs"], "option --inputs needs a value"),
        (["PKG", "--seed", "x"], "--seed expects a non-negative integer"),
        (["PKG", "--seed", "-1"], "--seed expects a non-negative integer"),
    ],
)
def test_usage_errors(build, compiled_package, args, message):
    args = [compiled_package.path if a == "PKG" else a for a in args]
    result = run_cmd(build.runner, *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize("typo, suggestion", [("--input", "--inputs"), ("--trusted_key", "--trusted-key"),
                                              ("--bitwize", "--bitwise"), ("--bogus", None)])
def test_a_misspelt_option_gets_one_line_with_the_closest_one(build, compiled_package, typo, suggestion):
    """The error, a "did you mean" and a pointer to --help, not 80 lines of usage
    under which the error scrolls away."""
    result = run_cmd(build.runner, compiled_package.path, typo, "x")
    assert result.returncode == 2
    hint = f" Did you mean {suggestion}?" if suggestion else ""
    assert result.stderr.splitlines() == [
        f"aoti_runner: error: unknown option {typo}.{hint} Run aoti_runner --help for every option."]


def test_every_option_can_be_suggested(build):
    """The suggestion list in main.cpp holds every option the parser takes."""
    import re

    from conftest import REPO_ROOT

    source = (REPO_ROOT / "cpp_runtime" / "main.cpp").read_text()
    parsed = set(re.findall(r'arg == "(--[a-z-]+)"', source))
    listed = set(re.findall(r'"(--[a-z-]+)"', source[source.index("kOptions = {"):source.index("};", source.index(
        "kOptions = {"))]))
    assert parsed == listed


def test_help(build):
    result = run_cmd(build.runner, "--help")
    assert result.returncode == 0
    assert "Usage: aoti_runner <model.pt2> [OP_LIBRARY.so ...]" in result.stdout
    assert "Exit codes" in result.stdout


def test_help_lists_every_option_the_runner_accepts(build):
    """Each option main.cpp parses is in --help (--pin-threads was missing once)."""
    import re

    from conftest import REPO_ROOT

    parsed = set(re.findall(r'arg == "(--[a-z-]+)"', (REPO_ROOT / "cpp_runtime" / "main.cpp").read_text()))
    assert {"--pin-threads", "--input-shape", "--intra-op-threads"} <= parsed
    result = run_cmd(build.runner, "--help")
    assert result.returncode == 0
    # Options open a line of the options list, alone or paired ("--rtol R --atol A").
    rows = re.findall(r"^\s+(--[a-z-]+)(?: [A-Z]+)?(?: (--[a-z-]+))?", result.stdout, re.MULTILINE)
    listed = {option for row in rows for option in row if option}
    assert parsed - {"--help"} <= listed, sorted(parsed - listed)
