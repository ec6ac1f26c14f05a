"""Models that return Python scalars: PyTorch's own AOTI test model test_symint_item
(``tensor.item()`` returned alone) through every stage, and a model returning every
kind (SymInt, SymFloat, SymBool, a size, int/float/bool constants) beside a tensor.
The Python API returns the Python values in the model's structure; both runners, as
processes, write the same 0-d tensors bit for bit and print them in the same words;
the eager check covers them like tensors. One compile per model (session fixture)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, Build, ScalarPackages, run_cli, run_cmd

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.models.user import flatten_outputs  # noqa: E402
from aoti_deploy.package.spec import TensorSpec  # noqa: E402
from aoti_deploy.runtime.tensor_files import save_tensors  # noqa: E402
from aoti_deploy.verify.bits import compare_bits  # noqa: E402
from examples.scalar_models import BatchStats, SymIntItem, batch_stats_inputs, symint_item_inputs  # noqa: E402

STATS_KINDS = {"count": "int", "mean": "float", "flagged": "bool", "rows": "int", "scale": "int", "version": "int",
               "threshold": "float", "calibrated": "bool"}


def _written(path: Path) -> list[torch.Tensor]:
    """A runner's --outputs file as a list, in the package's order (a dict by name for a
    model that returns one)."""
    written = torch.load(path)
    return list(written.values()) if isinstance(written, dict) else list(written)


def _both_runners(package: Path, build: Build, inputs: list[torch.Tensor], tmp: Path, *extra: object
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str], list[str]]:
    """run_inference and aoti_runner, each a process, on the same input file: their
    outputs read back, and the lines each printed."""
    tmp.mkdir(parents=True, exist_ok=True)
    save_tensors(tmp / "in.pt", inputs)
    py = run_cli("run_inference", package, "--inputs", tmp / "in.pt", "--outputs", tmp / "py.pt", *extra, cwd=tmp,
                 build=build)
    assert py.returncode == 0, py.stdout + py.stderr
    cpp = run_cmd(build.runner, package, "--inputs", tmp / "in.pt", "--outputs", tmp / "cpp.pt", *extra)
    assert cpp.returncode == 0 and "terminate called" not in cpp.stderr, cpp.stdout + cpp.stderr
    return _written(tmp / "py.pt"), _written(tmp / "cpp.pt"), py.stdout.splitlines(), cpp.stdout.splitlines()


def test_symint_item_passes_every_stage(scalar_packages: ScalarPackages, build: Build, tmp_path: Path) -> None:
    """PyTorch's test_symint_item: export (checked against eager), the spec, the Python
    API (an int, as eager), run_inference and aoti_runner (the same 0-d int64 tensor, bit
    for bit, named as an int), and both runners' eager check."""
    package = scalar_packages.item
    assert package.report is not None and package.report.passed, str(package.report)
    assert package.spec.outputs == [TensorSpec((), "int64", name="output", kind="int")]

    loaded = ad.load(package.path)
    for value in (1, -7, 2**31 - 1):
        out = loaded(*symint_item_inputs(value))
        assert type(out) is int and out == value == SymIntItem()(*symint_item_inputs(value))

    inputs = list(symint_item_inputs(-7))
    py, cpp, py_lines, cpp_lines = _both_runners(package.path, build, inputs, tmp_path / "run")
    assert [(t.dtype, t.shape) for t in cpp] == [(torch.int64, torch.Size([]))]
    assert compare_bits(cpp[0], py[0]).identical and int(cpp[0]) == -7
    assert "output[0] (output): int -7" in py_lines and "output[0] (output): int -7" in cpp_lines

    eager = save_tensors(tmp_path / "eager.pt", flatten_outputs(SymIntItem()(*inputs)))
    for run in (lambda: run_cmd(build.runner, package.path, "--inputs", tmp_path / "run" / "in.pt",
                                "--eager-reference", eager),
                lambda: run_cli("run_inference", package.path, "--inputs", tmp_path / "run" / "in.pt",
                                "--eager-reference", eager, cwd=tmp_path, build=build)):
        result = run()
        assert result.returncode == 0 and "compiled vs eager: PASSED (bit-identical)" in result.stdout, \
            result.stdout + result.stderr
    parity = run_cmd(build.runner, package.path, "--inputs", tmp_path / "run" / "in.pt", "--expected",
                     tmp_path / "run" / "py.pt")
    assert parity.returncode == 0 and "runtime parity: PASSED (bit-identical)" in parity.stdout, parity.stdout


def test_every_scalar_kind_comes_back_as_the_models_python_value(scalar_packages: ScalarPackages) -> None:
    """At another size than the example: each scalar output of the dict comes back as
    the Python type eager returns, ints and bools equal to eager's, the float constant
    exact and the float32 mean within a float32 rounding of eager's."""
    package = scalar_packages.stats
    assert [(t.name, t.kind, t.dtype) for t in package.spec.outputs[1:]] == [
        (name, kind, {"int": "int64", "float": "float64", "bool": "bool"}[kind]) for name, kind in STATS_KINDS.items()]
    assert package.spec.outputs[0].kind == "tensor" and package.spec.outputs_by_name
    for rows, flag in ((7, False), (1, True)):
        inputs = batch_stats_inputs(rows, seed=rows, flag=flag)
        out = ad.load(package.path)(*inputs)
        eager = BatchStats()(*inputs)
        assert list(out) == list(eager)
        for key in STATS_KINDS:
            assert type(out[key]) is type(eager[key]), (key, out[key], eager[key])
            if key != "mean":
                assert out[key] == eager[key], (key, out[key], eager[key])
        assert out["mean"] == pytest.approx(eager["mean"], rel=1e-6, abs=1e-6)
        assert torch.equal(out["y"], eager["y"])


def test_scalar_outputs_have_the_same_bits_and_words_in_both_runners(scalar_packages: ScalarPackages, build: Build,
                                                                     tmp_path: Path) -> None:
    """run_inference and aoti_runner on the dict model: every output the same bits, each
    scalar a 0-d tensor of its kind's dtype, printed in the same line by both."""
    package = scalar_packages.stats
    py, cpp, py_lines, cpp_lines = _both_runners(package.path, build, list(batch_stats_inputs(9, seed=3)), tmp_path)
    assert len(py) == len(cpp) == 1 + len(STATS_KINDS)
    for k, (actual, expected) in enumerate(zip(cpp, py)):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, k
        assert compare_bits(actual, expected).identical, k
    dtypes = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}
    assert [(t.dtype, t.dim()) for t in cpp[1:]] == [(dtypes[kind], 0) for kind in STATS_KINDS.values()]
    scalar_lines = [line for line in cpp_lines if line.startswith("output[")]
    assert scalar_lines == [line for line in py_lines if line.startswith("output[")]
    assert scalar_lines[0] == f"output[1] (count): int {int(cpp[1])}"
    assert "output[4] (rows): int 9" in scalar_lines and "output[5] (scale): int 19" in scalar_lines
    assert "output[7] (threshold): float 0.10000000000000001" in scalar_lines
    assert "output[8] (calibrated): bool true" in scalar_lines

    # --inspect names each kind, in the rows and words of the Python side's inspect.
    inspect = run_cmd(build.runner, package.path, "--inspect")
    assert inspect.returncode == 0, inspect.stderr
    rows = [tuple(line.split(": ", 1)) if ": " in line else (line.rstrip(":"), "")
            for line in inspect.stdout.splitlines()[1:]]
    assert rows == package.spec.describe()
    assert dict(rows)["output[1]"] == "count  int (a 0-d int64 tensor)"
    assert dict(rows)["output[7]"] == "threshold  float (a 0-d float64 tensor)"


def test_the_eager_check_covers_scalar_outputs(scalar_packages: ScalarPackages, build: Build, tmp_path: Path) -> None:
    """The export's check compared every scalar output with eager's, at both sizes; a
    scalar that differs from the reference fails the check, in the API and in the C++
    runner's --eager-reference (exit 1), like a tensor would."""
    package = scalar_packages.stats
    checked = [check.name for check in package.report.outputs]
    for name in STATS_KINDS:
        assert sum(f"output '{name}'" in label for label in checked) == 2, (name, checked)

    class OffByOne(BatchStats):
        def forward(self, x: torch.Tensor, flag: torch.Tensor) -> dict[str, object]:
            out = super().forward(x, flag)
            return {**out, "count": out["count"] + 1, "calibrated": False}

    inputs = batch_stats_inputs(5, seed=11)
    report = package.verify(inputs, model=OffByOne())
    failed = [check.name for check in report.outputs if not check.passed]
    assert not report.passed and failed == ["output 'count'", "output 'calibrated'"], str(report)

    save_tensors(tmp_path / "in.pt", list(inputs))
    eager = save_tensors(tmp_path / "eager.pt", flatten_outputs(OffByOne()(*inputs)))
    cpp = run_cmd(build.runner, package.path, "--inputs", tmp_path / "in.pt", "--eager-reference", eager)
    assert cpp.returncode == 1 and "compiled vs eager: FAILED" in cpp.stdout, cpp.stdout + cpp.stderr
    good = save_tensors(tmp_path / "good.pt", flatten_outputs(BatchStats()(*inputs)))
    cpp = run_cmd(build.runner, package.path, "--inputs", tmp_path / "in.pt", "--eager-reference", good)
    assert cpp.returncode == 0 and "compiled vs eager: PASSED" in cpp.stdout, cpp.stdout + cpp.stderr
