"""Ordinary models pass an honest verdict: two checks, named apart. Runtime parity is
bitwise (the Python and the C++ runtime of one package give the same bits, through
--expected expected.pt); compiled vs eager holds to torch.testing's tolerance by
default, recorded in the package (--eager-reference eager.pt). The models are those
of examples/real_models.py, exported with default flags."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO_ROOT, Build, edit_spec, run_cmd
from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import BITWISE, CLOSE, Tolerance
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
from aoti_deploy.verify.bits import compare_bits

RUN_INFERENCE = Path(sys.executable).parent / "run_inference"


@dataclass(frozen=True)
class Example:
    name: str
    path: Path
    reference: Path
    libraries: list[Path]
    output: str


# name: (factory, export_compile options); every one with default tolerance flags.
EXAMPLES = {
    # The small CNN (conv, batchnorm, relu, maxpool, adaptive avg pool, linear,
    # softmax) at 2x3x64x64, with residual blocks and a dynamic batch.
    "resnet_cnn": ["--model", "examples.real_models:resnet_cnn", "--input-shape", "2,3,64,64",
                   "--dynamic-dim", "0.0=1:32"],
    "transformer": ["--model", "examples.real_models:transformer_encoder", "--input-shape", "2,16,64",
                    "--dynamic-dim", "0.1=2:128"],
    "affine_sum_float16": ["--model", "examples.real_models:affine_linear_sum", "--input-shape", "8,64",
                           "--dtype", "float16", "--fake-module", "examples.extra_ops_fakes"],
    # The second model: another project's op library, a linear layer, a sum.
    "affine_sum_float32": ["--model", "examples.real_models:affine_linear_sum", "--input-shape", "8,64",
                           "--fake-module", "examples.extra_ops_fakes"],
}


def _export(args: list[str]) -> tuple[int, str]:
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    result = CliRunner().invoke(export_compile_app, args + ["--no-show-graph"])
    return result.exit_code, result.output


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory, build: Build) -> dict[str, Example]:
    """Each example exported once, with default flags and a saved reference."""
    built = {}
    for name, args in EXAMPLES.items():
        out = tmp_path_factory.mktemp(name)
        libraries = [build.extra_op_library] if "affine" in name else []
        code, output = _export(args + [arg for lib in libraries for arg in ("--op-lib", str(lib))] + [
            "--save-reference", str(out / "ref"), "--output", str(out / "model.pt2")])
        assert code == 0, output
        built[name] = Example(name, out / "model.pt2", out / "ref", libraries, output)
    return built


def _runners(build: Build, example: Example, *args: object, package: Path | None = None, tmp: Path
             ) -> dict[str, tuple[int, str]]:
    """Both runners on the example's reference inputs with ``args``: (exit code, output)."""
    package = package or example.path
    common = [*example.libraries, "--inputs", example.reference / "inputs.pt", *args]
    python = run_cmd(RUN_INFERENCE, package, *common, "--outputs", tmp / "py.pt")
    cpp = run_cmd(build.runner, package, *common, "--outputs", tmp / "cpp.pt")
    assert "terminate called" not in cpp.stderr
    return {"python": (python.returncode, python.stdout + python.stderr), "cpp": (cpp.returncode, cpp.stdout + cpp.stderr)}


def _check_lines(output: str) -> list[str]:
    """The lines both runners must print alike: reports and verdicts."""
    return [line for line in output.splitlines() if line.startswith(("verify: ", "runtime parity: ",
                                                                      "compiled vs eager: ", "identity: "))]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_exports_with_default_flags_and_records_the_rule(examples, name):
    example = examples[name]
    assert "verify eager vs package: PASSED" in example.output, example.output
    assert read_package_spec(example.path).eager_check == Tolerance(CLOSE)
    assert all((example.reference / f).is_file() for f in ("inputs.pt", "expected.pt", "eager.pt"))


def test_the_cnn_differs_from_eager_in_its_last_bits(examples):
    """What makes a tolerance necessary: the verdict says the bits differ, and by how much."""
    output = examples["resnet_cnn"].output
    assert re.search(r"PASSED \(NOT bit-identical, within rtol 1\.3e-06, atol 1e-05: max abs diff \S+, "
                     r"max rel diff \S+, max ULP distance [1-9]\d*; 0 of \d+ elements outside the tolerance\)",
                     output), output


@pytest.mark.parametrize("name", EXAMPLES)
def test_runtimes_agree_bitwise_and_stay_within_the_recorded_tolerance(examples, build, name, tmp_path):
    example = examples[name]
    results = _runners(build, example, "--expected", example.reference / "expected.pt",
                       "--eager-reference", example.reference / "eager.pt", tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 0, (runtime, output)
        assert "runtime parity: PASSED (bit-identical)" in output, (runtime, output)
        assert "compiled vs eager: PASSED" in output, (runtime, output)
        assert "PASSED" in output.splitlines(), (runtime, output)  # the whole run's verdict line
    assert _check_lines(results["python"][1]) == _check_lines(results["cpp"][1])
    python, cpp = load_tensors(tmp_path / "py.pt"), load_tensors(tmp_path / "cpp.pt")
    assert all(compare_bits(p, c).identical for p, c in zip(python, cpp))


def test_a_reference_outside_the_tolerance_fails_alike_in_both_runners(examples, build, tmp_path):
    example = examples["resnet_cnn"]
    eager = load_tensors(example.reference / "eager.pt")
    eager[0][1, 3] += 0.01  # softmax outputs near 0.1: 1e-2 is far beyond 1e-5 + 1.3e-6 * 0.1
    crafted = save_tensors(tmp_path / "crafted.pt", eager)
    results = _runners(build, example, "--eager-reference", crafted, tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 1, (runtime, output)
        assert re.search(r"compiled vs eager: FAILED \(rtol 1\.3e-06, atol 1e-05: .*; 1 of 20 elements outside "
                         r"the tolerance\)", output), (runtime, output)
        assert "first at [1, 3]" in output, (runtime, output)
    assert _check_lines(results["python"][1]) == _check_lines(results["cpp"][1])


def test_a_nan_where_eager_has_a_number_fails_under_any_atol(examples, build, tmp_path):
    example = examples["transformer"]
    outputs = load_tensors(example.reference / "expected.pt")
    outputs[0][0, 0, 0] = float("nan")  # a NaN the package did not return: the reference holds it
    crafted = save_tensors(tmp_path / "nan.pt", outputs)
    results = _runners(build, example, "--eager-reference", crafted, "--rtol", "0", "--atol", "1e30", tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 1, (runtime, output)
        assert "compiled vs eager: FAILED (rtol 0, atol 1e+30" in output, (runtime, output)
        assert "1 of 2048 outside the tolerance, first at [0, 0, 0]: got " in output, (runtime, output)
    assert _check_lines(results["python"][1]) == _check_lines(results["cpp"][1])


def test_bitwise_on_the_cnn_fails_and_reports_the_ulp_distance(examples, build, tmp_path):
    example = examples["resnet_cnn"]
    results = _runners(build, example, "--eager-reference", example.reference / "eager.pt", "--bitwise", tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 1, (runtime, output)
        assert re.search(r"compiled vs eager: FAILED \(bitwise: .*max ULP distance [1-9]\d*; \d+ of 20 elements "
                         r"differ\)", output), (runtime, output)
    assert _check_lines(results["python"][1]) == _check_lines(results["cpp"][1])


def test_an_explicit_tolerance_in_both_runners(examples, build, tmp_path):
    example = examples["affine_sum_float16"]
    results = _runners(build, example, "--eager-reference", example.reference / "eager.pt",
                       "--rtol", "0.01", "--atol", "0.001", tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 0 and "(rtol 0.01, atol 0.001): " in output, (runtime, output)


@pytest.mark.parametrize(("args", "message"), [
    (["--rtol", "0.1"], "--rtol and --atol go together"),
    (["--bitwise", "--max-ulp", "3"], "--bitwise and --max-ulp each choose the rule"),
    (["--max-ulp", "2", "--rtol", "0.1", "--atol", "0.1"], "--max-ulp and --rtol/--atol each choose the rule"),
])
def test_conflicting_tolerance_options_are_usage_errors_in_both(examples, build, tmp_path, args, message):
    results = _runners(build, examples["affine_sum_float32"], "--eager-reference",
                       examples["affine_sum_float32"].reference / "eager.pt", *args, tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 2 and message in output, (runtime, output)
        assert "ran " not in output, (runtime, output)  # refused before running


def test_a_package_without_a_recorded_rule_keeps_todays_behaviour(examples, build, tmp_path):
    """A package from before the rule was recorded: --expected is bitwise (and
    --max-ulp applies to it, as before); --eager-reference uses torch.testing's defaults."""
    example = examples["resnet_cnn"]
    old = edit_spec(example.path, tmp_path / "old.pt2", eager_check=None)
    assert read_package_spec(old).eager_check is None
    inspect = run_cmd(build.runner, old, "--inspect")
    assert ("eager check: not recorded (--expected compares bitwise; --eager-reference uses torch.testing's "
            "defaults)") in inspect.stdout, inspect.stdout
    results = _runners(build, example, "--expected", example.reference / "eager.pt", package=old, tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 1 and "runtime parity: FAILED (bitwise" in output, (runtime, output)
    results = _runners(build, example, "--expected", example.reference / "eager.pt", "--max-ulp", "100000",
                       package=old, tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 0 and "runtime parity: PASSED (NOT bit-identical, within 100000 ULP" in output, (runtime, output)
    results = _runners(build, example, "--eager-reference", example.reference / "eager.pt", package=old, tmp=tmp_path)
    for runtime, (code, output) in results.items():
        assert code == 0 and "compiled vs eager: PASSED (NOT bit-identical, within rtol 1.3e-06" in output, (runtime, output)


def test_inspect_shows_the_recorded_rule_in_both(examples, compiled_package, build):
    cnn = run_cmd(build.runner, examples["resnet_cnn"].path, "--inspect").stdout
    assert "eager check: torch.testing's rtol/atol for each dtype" in cnn, cnn
    identity = run_cmd(build.runner, compiled_package.path, "--inspect").stdout
    assert "eager check: bitwise" in identity, identity
    assert read_package_spec(compiled_package.path).eager_check == Tolerance(BITWISE)
    python = run_cmd(Path(sys.executable).parent / "aoti-deploy", "inspect", examples["resnet_cnn"].path, "--json")
    assert json.loads(python.stdout)["eager_check"] == {"rule": "close", "max_ulp": 0, "rtol": None, "atol": None}


def test_compare_tensors_takes_the_tolerance_options(examples, tmp_path):
    ref = examples["resnet_cnn"].reference
    runner = CliRunner()
    bitwise = runner.invoke(cli_app, ["compare", str(ref / "expected.pt"), str(ref / "eager.pt")])
    assert bitwise.exit_code == 1 and "compare: FAILED (bitwise" in bitwise.output, bitwise.output
    close = runner.invoke(cli_app, ["compare", str(ref / "expected.pt"), str(ref / "eager.pt"), "--rtol", "1e-4",
                                                "--atol", "1e-5"])
    assert close.exit_code == 0 and "compare: PASSED (NOT bit-identical, within rtol 0.0001, atol 1e-05" in close.output
    ulp = runner.invoke(cli_app, ["compare", str(ref / "expected.pt"), str(ref / "eager.pt"), "--max-ulp", "1000000"])
    assert ulp.exit_code == 0, ulp.output
    lone = runner.invoke(cli_app, ["compare", str(ref / "expected.pt"), str(ref / "eager.pt"), "--atol", "1"])
    assert lone.exit_code == 2 and "--rtol and --atol go together" in lone.output
