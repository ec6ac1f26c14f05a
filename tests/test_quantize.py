"""int8 deploys (``quantize=``, compiler/quantize.py), for real: torchao's PT2E flow,
Inductor's int8 lowering, both runtimes as the user runs them.

- A CNN trained on scikit-learn's digits (real data) keeps its held-out accuracy
  within a point of fp32 eager, and C++ gives the Python runtime's bits.
- The compiled code really runs oneDNN's int8 kernels; a compile that would fall
  back to fp32 (freezing off, pytorch/ao#4566) is refused, naming what fell back.
- A tiny transformers text model goes through int8-dynamic and the C++ runner.
- Bad options and calibration get a clear error before anything compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aoti_deploy as ad
from aoti_deploy.compiler.package_build import VNNI_FLAGS, int8_host_hint
from aoti_deploy.compiler.options import ExportOptions
from aoti_deploy.compiler.quantize import compiled_int8_kernels
from aoti_deploy.errors import CompileError, ExportError, InputError
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import compare_bits
from conftest import Build, require_transformers, run_cli, run_cmd, run_cpp_runtime, run_python_runtime

try:
    import sklearn  # noqa: F401
    import torchao  # noqa: F401
except ImportError as missing:
    # ./scripts/test.sh sets AOTI_DEPLOY_REQUIRE_QUANT=1: CI must not pass by skipping these.
    if os.environ.get("AOTI_DEPLOY_REQUIRE_QUANT") == "1":
        pytest.fail(f"AOTI_DEPLOY_REQUIRE_QUANT=1, but the quant extra is missing: {missing}", pytrace=False)
    pytest.skip(f"needs the quant extra (pip install -e '.[quant]'): {missing}", allow_module_level=True)

from examples.quant_models import calibration, digits, digits_cnn  # noqa: E402


def both_runtimes(build: Build, package: Path, inputs: list[torch.Tensor], tmp: Path) -> tuple[list, list]:
    """The package's outputs from run_inference and from aoti_runner, each a process
    reading the same input file."""
    path = save_tensors(tmp / "in.pt", inputs)
    code, output = run_python_runtime(package, build.op_library, path, tmp / "py.pt")
    assert code == 0, output
    code, output = run_cpp_runtime(build.runner, package, build.op_library, path, tmp / "cpp.pt")
    assert code == 0, output
    python, cpp = torch.load(tmp / "py.pt"), torch.load(tmp / "cpp.pt")
    if isinstance(python, dict):  # a model that returns its outputs by name
        assert list(cpp) == list(python)
        python, cpp = python.values(), cpp.values()
    return list(python), list(cpp)


def test_int8_keeps_the_digits_accuracy(digits_int8: ad.Package) -> None:
    model, _ = digits_cnn()
    _, (x_test, y_test) = digits()
    with torch.no_grad():
        fp32 = (model(x_test).argmax(1) == y_test).float().mean().item()
    int8 = torch.cat([digits_int8(chunk) for chunk in x_test.split(60)])
    int8_accuracy = (int8.argmax(1) == y_test).float().mean().item()
    assert fp32 > 0.95, f"the CNN did not train: {fp32:.3f}"
    assert int8_accuracy >= fp32 - 0.01, f"int8 {int8_accuracy:.4f} against fp32 {fp32:.4f}"


def test_int8_runs_oneDNN_int8_kernels_and_records_it(digits_int8: ad.Package) -> None:
    record = digits_int8.spec.quantization
    found = compiled_int8_kernels(digits_int8.path)
    # The CNN has two convolutions and one linear; the generated code calls each's int8 kernel.
    assert (found["convolutions"], found["linears"], found["fp32_heavy"]) == (2, 1, 0)
    assert (record["convolutions"], record["linears"]) == (2, 1)
    assert (record["int8_convolutions"], record["int8_linears"]) == (2, 1)
    assert record["mode"] == "int8" and record["calibration_calls"] == 8
    assert 0 < record["max_abs"] < 1 and record["top1_agreement"] >= 0.95
    # The rule against the quantized model in eager is twice the drift, recorded.
    assert digits_int8.spec.eager_check.atol == 2 * record["max_abs"]


def test_cpp_gives_the_python_runtime_bits(digits_int8: ad.Package, build: Build, tmp_path: Path) -> None:
    _, (x_test, _) = digits()
    python, cpp = both_runtimes(build, digits_int8.path, [x_test[60:120]], tmp_path)
    report = compare_bits(cpp[0], python[0])
    assert report.identical, report


def test_inspect_shows_the_quantization(digits_int8: ad.Package, build: Build, tmp_path: Path) -> None:
    shown = run_cli("aoti-deploy", "inspect", digits_int8.path, "--json", cwd=tmp_path, build=build)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["quantization"] == digits_int8.spec.quantization
    line = ("int8 (static, 8 calibration call(s)): 2 of 2 quantized convolution(s) and 1 of 1 linear(s) run oneDNN "
            "int8 kernels; against the fp32 model: max abs")
    described = dict(digits_int8.spec.describe())["quantization"]
    assert described.startswith(line)
    runner = run_cmd(build.runner, digits_int8.path, "--inspect")
    assert runner.returncode == 0, runner.stderr
    assert f"quantization: {described}" in runner.stdout


def test_a_compile_that_falls_back_to_fp32_is_refused(tmp_path: Path) -> None:
    model, args = digits_cnn()
    with pytest.raises(CompileError) as raised:
        ad.export(model, args, quantize="int8", calibration=calibration(2), package_path=tmp_path / "f.pt2",
                  inductor_configs={"freezing": False})
    message = str(raised.value)
    assert "would silently run in fp32: 2 of 2 quantized convolution(s) compiled without an int8 kernel" in message
    assert "freezing" in message
    assert not (tmp_path / "f.pt2").exists()


def test_the_cli_quantizes_a_transformer_that_runs_in_cpp(build: Build, tmp_path: Path) -> None:
    """`aoti-deploy export --quantize int8-dynamic` on a tiny BERT (random weights): every
    linear runs an int8 kernel, and the C++ runner gives the Python runtime's bits."""
    require_transformers()
    from examples.hf_models import bert

    made = run_cli("aoti-deploy", "export", "--model", "examples.hf_models:bert", "--quantize", "int8-dynamic",
                   "--output", tmp_path / "bert.pt2", "--no-show-graph", cwd=Path(__file__).parents[1], build=build,
                   COLUMNS="400")
    if made.returncode != 0 and not host_cpu_flags() & set(VNNI_FLAGS):
        # Without VNNI oneDNN's u8*s8 sums saturate: the check may fail, and then the
        # export says that this host is the likely cause, and writes nothing.
        assert made.returncode == 1, made.stdout + made.stderr
        assert "likely cause: this host has no VNNI" in made.stdout, made.stdout
        assert not (tmp_path / "bert.pt2").exists()
        pytest.skip("int8 on a host without VNNI failed its check, as said (a host with VNNI runs the rest)")
    assert made.returncode == 0, made.stdout + made.stderr
    package = ad.load(tmp_path / "bert.pt2")
    record = package.spec.quantization
    assert record["mode"] == "int8-dynamic" and record["calibration_calls"] == 0
    assert record["linears"] > 0 and record["int8_linears"] == record["linears"], record
    _, inputs = bert()
    tensors = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    python, cpp = both_runtimes(build, package.path, tensors, tmp_path)
    assert len(cpp) == len(python) > 0
    for got, want in zip(cpp, python):
        assert compare_bits(got, want).identical


@pytest.mark.parametrize("quantize, flags, said", [
    ("int8", {"avx2", "fma"}, True),
    ("int8-dynamic", {"avx2"}, True),
    ("int8", {"avx2", "avx512_vnni"}, False),
    ("int8", {"avx2", "avx_vnni"}, False),
    (None, {"avx2"}, False),
])
def test_an_int8_check_failure_on_a_host_without_vnni_names_it(quantize: str | None, flags: set[str],
                                                              said: bool) -> None:
    hint = int8_host_hint(ExportOptions(quantize=quantize), flags)
    assert bool(hint) == said
    if said:
        assert hint.startswith("this host has no VNNI") and "saturate" in hint


def test_the_cli_reads_the_calibration_file_and_requires_one(tmp_path: Path) -> None:
    """The calibration batches reach the export from --calibration FILE (here batches of
    the wrong shape, refused at calibration, before any compile), and int8 without
    one is refused."""
    from typer.testing import CliRunner

    from aoti_deploy.cli.export_compile import app

    torch.save([torch.zeros(64, 1, 8, 8)], tmp_path / "cal.pt")
    read = CliRunner().invoke(app, ["--model", "examples.quant_models:digits_cnn", "--quantize", "int8",
                                    "--calibration", str(tmp_path / "cal.pt"), "--output", str(tmp_path / "x.pt2")])
    assert read.exit_code == 2, read.output
    assert "calibration[0] (shapes [64, 1, 8, 8]) does not run through the exported model" in read.output
    missing = CliRunner().invoke(app, ["--model", "examples.quant_models:digits_cnn", "--quantize", "int8",
                                       "--output", str(tmp_path / "none.pt2")])
    assert missing.exit_code == 2
    assert "pass --calibration FILE" in missing.output
    assert not (tmp_path / "x.pt2").exists() and not (tmp_path / "none.pt2").exists()


@pytest.mark.parametrize("options, words", [
    ({"quantize": "int4"}, "unknown quantize mode 'int4'; expected one of int8, int8-dynamic"),
    ({"quantize": "int8"}, "quantize='int8' sets its activation scales from calibration calls, and none were given"),
    ({"quantize": "int8", "calibration": [torch.zeros(60, 1, 8, 8)], "target": "onnx"},
     "quantize makes int8 .pt2 packages for the CPU"),
    ({"quantize": "int8", "calibration": torch.zeros(60, 1, 8, 8)}, "calibration must be a list of calls"),
    ({"quantize": "int8", "calibration": [(torch.zeros(60, 1, 8, 8), torch.zeros(1))]},
     "calibration[0] holds 2 tensor(s), but the example call has 1"),
    ({"quantize": "int8", "calibration": [torch.zeros(64, 1, 8, 8)]},
     "calibration[0] (shapes [64, 1, 8, 8]) does not run through the exported model"),
], ids=["mode", "no-calibration", "onnx", "one-tensor", "arity", "shape"])
def test_bad_options_get_a_clear_error(options: dict, words: str, tmp_path: Path) -> None:
    model, args = digits_cnn()
    with pytest.raises(InputError, match=None) as raised:
        ad.export(model, args, package_path=tmp_path / "x.pt2", **options)
    assert words in str(raised.value)


def test_a_model_with_nothing_to_quantize_is_refused(tmp_path: Path) -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2

    with pytest.raises(ExportError, match="found no convolution or linear to quantize"):
        ad.export(Scale(), (torch.randn(4, 4),), quantize="int8-dynamic", package_path=tmp_path / "s.pt2")


def test_torchao_is_quiet_on_import() -> None:
    """torchao logs a line per CUDA-only extension it cannot load; the toolkit's import
    of it says nothing."""
    code = "from aoti_deploy.compiler.quantize import require_torchao; require_torchao()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Failed to load" not in done.stderr + done.stdout, done.stderr


# bf16 (precision="bf16", compiler/precision.py): needs a host that computes bfloat16 natively.
from aoti_deploy.compiler.precision import BF16_FLAGS, bf16_flag  # noqa: E402
from aoti_deploy.package.host import host_cpu_flags  # noqa: E402

needs_bf16 = pytest.mark.skipif(not set(BF16_FLAGS) & host_cpu_flags(),
                                reason="this host has neither AVX512-BF16 nor AMX-BF16")


@needs_bf16
def test_bf16_keeps_accuracy_agrees_across_runtimes_and_requires_the_flag(build: Build, tmp_path: Path) -> None:
    model, args = digits_cnn()
    package = ad.export(model, args, precision="bf16", package_path=tmp_path / "bf16.pt2")
    _, (x_test, y_test) = digits()
    with torch.no_grad():
        fp32 = (model(x_test).argmax(1) == y_test).float().mean().item()
    bf16 = torch.cat([package(chunk) for chunk in x_test.split(60)])
    assert bf16.dtype == torch.float32  # inputs and outputs stay as the fp32 model's
    assert (bf16.argmax(1) == y_test).float().mean().item() >= fp32 - 0.01
    # The compute really is bf16: the outputs are not fp32 eager's.
    assert not compare_bits(bf16[:60], model(x_test[:60]).detach()).identical
    assert set(package.spec.cpu_flags) & set(BF16_FLAGS)
    assert "bf16 (weights and compute" in package.spec.optimizations
    python, cpp = both_runtimes(build, package.path, [x_test[:60]], tmp_path)
    assert compare_bits(cpp[0], python[0]).identical
    # Package.verify checks against the bf16 model, not fp32's (which it would fail).
    assert package.verify(x_test[:60]).passed


def test_bf16_is_refused_on_a_host_without_it() -> None:
    with pytest.raises(InputError, match="AVX512-BF16 or AMX-BF16"):
        bf16_flag({"avx2", "avx512f"})
    assert bf16_flag({"avx512f", "amx_bf16"}) == "amx_bf16"
    with pytest.raises(InputError, match="do not combine"):
        ad.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), precision="bf16", quantize="int8-dynamic")


class _Masked(torch.nn.Module):
    """Logits with -inf where a mask says so, as attention and classifier heads do."""

    def __init__(self, shift: float = 0.0) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.shift).masked_fill(x > 1, float("-inf"))


def test_drift_ignores_infinities_both_models_share_and_refuses_ones_they_do_not() -> None:
    from aoti_deploy.compiler.quantize import drift
    from aoti_deploy.models.call import CallInputs

    call = [CallInputs.of((torch.tensor([[0.5, 2.0, -1.0]]),), None)]
    moved = drift(_Masked(), _Masked(0.25), call)
    assert moved["max_abs"] == 0.25 and moved["top1_agreement"] == 1.0
    with pytest.raises(ExportError, match="becomes infinite or NaN where the fp32 model's is not"):
        drift(_Masked(), torch.nn.Identity(), call)


def test_a_low_precision_package_verifies_against_its_own_model_again(digits_int8: ad.Package, tmp_path: Path) -> None:
    _, (x_test, _) = digits()
    assert digits_int8.verify(x_test[:60]).passed  # against the quantized model, not fp32
