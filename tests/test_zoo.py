"""The models users deploy: tiny random-weight transformers models (BERT, GPT-2, a T5
encoder, ViT, ResNet; examples/hf_models.py, no downloads), each through the Python
API with torch.export's Dim dynamic shapes and keyword inputs, checked against eager
at two shapes, called with the model's own output type, run by the C++ runner with
the same bits at another shape, named as the model names its inputs and outputs, and
refusing an out-of-vocabulary id in both runtimes. One compile per model, shared
by every test here (session fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, Build, require_transformers

require_transformers()
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import aoti_deploy as ad  # noqa: E402
from aoti_deploy.runtime.tensor_files import save_tensors  # noqa: E402
from conftest import NAMES, TEXT, ZOO, ZooModel, zoo_other_shape as _other_shape  # noqa: E402
from examples.hf_models import VOCAB  # noqa: E402

@pytest.mark.parametrize("name", ZOO)
def test_export_passes_against_eager_at_two_shapes(zoo: dict[str, ZooModel], name: str) -> None:
    report = zoo[name].package.report
    assert report is not None and report.passed, str(report)
    shapes = {check.name.split(" output")[0] for check in report.outputs}
    assert len(shapes) == 2, shapes  # the example, and a second shape in the ranges


@pytest.mark.parametrize("name", ZOO)
def test_inputs_and_outputs_carry_the_models_names(zoo: dict[str, ZooModel], name: str) -> None:
    spec = zoo[name].package.spec
    inputs, outputs = NAMES[name]
    assert [t.name for t in spec.inputs] == inputs
    assert [t.name for t in spec.outputs][: len(outputs)] == outputs
    if name in TEXT:
        assert spec.inputs[0].values is not None and (spec.inputs[0].values.min, spec.inputs[0].values.max) == (0, VOCAB - 1)


@pytest.mark.parametrize("name", ZOO)
def test_call_returns_the_model_output_type_with_eagers_values(zoo: dict[str, ZooModel], name: str) -> None:
    entry = zoo[name]
    kwargs = _other_shape(name)
    loaded = ad.load(entry.package.path)
    out = loaded(**kwargs)
    with torch.no_grad():
        eager = entry.model(**kwargs)
    assert type(out) is type(eager)
    first = NAMES[name][1][0]
    torch.testing.assert_close(out[first], eager[first])


@pytest.mark.parametrize("name", ZOO)
def test_cpp_runner_gives_the_python_runtimes_bits(zoo: dict[str, ZooModel], name: str) -> None:
    report = zoo[name].package.verify((), _other_shape(name), against="cpp")
    assert report.passed and report.bit_identical, str(report)


def test_out_of_vocabulary_id_fails_alone_in_both_runtimes(zoo: dict[str, ZooModel], build: Build,
                                                           tmp_path: Path) -> None:
    entry = zoo["bert"]
    kwargs = dict(entry.kwargs)
    ids = kwargs["input_ids"].clone()
    ids[1, 3] = 5000
    with pytest.raises(ad.InputError, match=r"5000 at \[1, 3\].*\[0, 999\]"):
        entry.package(**{**kwargs, "input_ids": ids})
    # The package keeps running good inputs.
    assert entry.package(**kwargs) is not None
    inputs = save_tensors(tmp_path / "oov.pt", [ids, kwargs["attention_mask"]])
    result = subprocess.run([str(build.runner), str(entry.package.path), "--inputs", str(inputs)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "5000" in result.stderr and "terminate called" not in result.stderr


def test_run_inference_runs_a_model_output_package_with_no_extra_option(zoo: dict[str, ZooModel], build: Build,
                                                                       tmp_path: Path) -> None:
    """run_inference (the CLI, a process) on a package whose model returns a
    ModelOutput: no --fake-module needed; the same bits as the C++ runner."""
    entry = zoo["bert"]
    kwargs = _other_shape("bert")
    inputs = save_tensors(tmp_path / "in.pt", [kwargs["input_ids"], kwargs["attention_mask"]])
    py = subprocess.run([str(Path(sys.executable).parent / "run_inference"), str(entry.package.path), "--inputs",
                         str(inputs), "--outputs", str(tmp_path / "py.pt")], capture_output=True, text=True,
                        timeout=300, env={**os.environ, "AOTI_DEPLOY_BUILD_DIR": str(build.dir)})
    assert py.returncode == 0, py.stdout + py.stderr
    cpp = subprocess.run([str(build.runner), str(entry.package.path), "--inputs", str(inputs), "--expected",
                          str(tmp_path / "py.pt")], capture_output=True, text=True, timeout=300)
    assert cpp.returncode == 0 and "runtime parity: PASSED (bit-identical)" in cpp.stdout, cpp.stdout + cpp.stderr


def test_package_benchmark_runs_every_path_at_two_batches(zoo: dict[str, ZooModel]) -> None:
    """The package benchmark on the tiny BERT: every path has a row at each batch,
    timed or skipped with a reason; ratios are to the fastest (no speed is asserted)."""
    from aoti_deploy.bench.package_bench import COMPILE, COMPILE_MAX, EAGER, ONNX, PYTHON, TRITON, cpp_row
    from aoti_deploy.compiler.onnx_export import missing_onnx_packages

    entry = zoo["bert"]
    steps: list[str] = []
    result = entry.package.benchmark((), entry.kwargs, iterations=3, warmup=1, threads=2, batches=(1, 3),
                                     max_autotune=False, triton=True, on_step=steps.append)
    assert isinstance(result, ad.BenchmarkResult) and result.batches == (1, 3) and result.threads == 2
    expected = [EAGER, COMPILE, COMPILE_MAX, PYTHON, cpp_row(1), cpp_row(2), ONNX, TRITON]
    assert result.paths() == expected
    for batch in (1, 3):
        rows = [row for row in result.rows if row.batch == batch]
        assert [row.path for row in rows] == expected
        timed = [row for row in rows if not row.skipped]
        assert {row.path for row in timed} >= {EAGER, PYTHON, cpp_row(1), cpp_row(2)}
        for row in timed:
            assert 0 < row.p50_us <= row.p99_us and row.throughput > 0
            assert row.p50_ratio >= 1.0 and row.p99_ratio >= 1.0 and 0 < row.throughput_ratio <= 1.0
        assert min(row.p50_ratio for row in timed) == 1.0 and max(row.throughput_ratio for row in timed) == 1.0
        assert result.row(COMPILE_MAX, batch).skipped == "not requested"
        assert "starts no server" in result.row(TRITON, batch).skipped
        onnx = result.row(ONNX, batch)
        assert (onnx.skipped and "ONNX" in onnx.skipped) if missing_onnx_packages() else onnx.p50_us is not None
    assert f"batch 3: {PYTHON}" in steps
    assert result.speedup(PYTHON, 3) == result.row(EAGER, 3).p50_us / result.row(PYTHON, 3).p50_us
    assert "| 3 | AOTI C++ runner, 2 threads |" in result.table()

