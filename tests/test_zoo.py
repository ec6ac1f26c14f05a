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


@pytest.mark.parametrize("name", ZOO)
def test_run_inference_runs_a_model_output_package_with_no_extra_option(zoo: dict[str, ZooModel], name: str,
                                                                       build: Build, tmp_path: Path) -> None:
    """run_inference (the CLI, a process) on each zoo package, whose model returns a
    ModelOutput: no --fake-module needed; a dict tensor file by the model's input
    names; the same bits as the C++ runner."""
    entry = zoo[name]
    kwargs = _other_shape(name)
    inputs = tmp_path / "in.pt"
    torch.save({key: kwargs[key] for key in NAMES[name][0]}, inputs)
    py = subprocess.run([str(Path(sys.executable).parent / "run_inference"), str(entry.package.path), "--inputs",
                         str(inputs), "--outputs", str(tmp_path / "py.pt")], capture_output=True, text=True,
                        timeout=300, env={**os.environ, "AOTI_DEPLOY_BUILD_DIR": str(build.dir)})
    assert py.returncode == 0, py.stdout + py.stderr
    cpp = subprocess.run([str(build.runner), str(entry.package.path), "--inputs", str(inputs), "--expected",
                          str(tmp_path / "py.pt")], capture_output=True, text=True, timeout=300)
    assert cpp.returncode == 0 and "runtime parity: PASSED (bit-identical)" in cpp.stdout, cpp.stdout + cpp.stderr
