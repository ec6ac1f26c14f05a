"""torch.export of the IdentityModel keeps both custom layers, and the package
records what it needs."""

from __future__ import annotations

import torch

from conftest import PACKAGE_SHAPE
from aoti_deploy.compiler.export import export_model, graph_calls, output_specs
from aoti_deploy.models.identity import IdentityModel
from aoti_deploy.models.user import DynamicDim
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import DimSpec, TensorSpec


def test_exported_graph_calls_the_torchbind_class_and_the_custom_op(op_library):
    program = export_model(IdentityModel(4).eval(), (torch.randn(1, 4, 5, 6),))
    graph = str(program.graph)
    assert "call_torchbind" in graph
    assert "my_ops.identity_conv_op" in graph
    assert graph.count("aten.conv2d") == 2
    calls = graph_calls(program)
    assert calls.ops == ["my_ops::identity_conv_op"]
    assert calls.classes == ["my_ops::IdentityConvClass"]


def test_eager_model_is_an_identity_on_random_input(op_library):
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        y = IdentityModel(3).eval()(x)
    assert torch.equal(y.view(torch.int32), x.view(torch.int32))


def test_package_records_its_spec(compiled_package):
    spec = read_package_spec(compiled_package.path)
    assert [str(d) for d in spec.inputs[0].dims] == ["2", "3", "8", "12"]
    assert spec.inputs[0].dtype == "float32"
    assert spec.device == "cpu"
    assert [str(op) for op in spec.required_ops] == ["my_ops::identity_conv_op"]
    assert spec.required_classes == ["my_ops::IdentityConvClass"]
    assert spec.op_libraries == ["libidentity_conv_ops.so"]
    assert spec.is_identity
    assert spec.torch_version == torch.__version__
    # AOTI's own entries survive next to ours.
    assert spec.aoti.get("AOTI_DEVICE_KEY") == "cpu"


def test_package_records_its_output(compiled_package):
    """An identity: one output of the input's shape and dtype, named as the model
    names them (the forward argument x; a lone output is "output")."""
    spec = read_package_spec(compiled_package.path)
    assert spec.outputs == [TensorSpec(tuple(DimSpec(n, n) for n in PACKAGE_SHAPE), "float32", name="output")]
    assert spec.inputs == [TensorSpec(tuple(DimSpec(n, n) for n in PACKAGE_SHAPE), "float32", name="x")]


def test_dynamic_package_records_its_output_ranges(dynamic_package):
    """float32, batch 1..8, height and width 1..64: an identity's output has the same ranges."""
    spec = read_package_spec(dynamic_package)
    dims = (DimSpec(1, 8), DimSpec(3, 3), DimSpec(1, 64), DimSpec(1, 64))
    assert spec.outputs == [TensorSpec(dims, "float32", name="output")]
    assert spec.inputs == [TensorSpec(dims, "float32", name="x")]


class _Outputs(torch.nn.Module):
    """Output sizes that are expressions of the input's size n: 2*n, n - 1, n. (n >= 3:
    torch.export specialises a slice of n - 1 == 1.)"""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.cat([x, x]), x[1:].to(torch.int32), x.sum(dim=1)


def test_output_sizes_range_over_their_expressions():
    x = torch.randn(4, 3)
    bounded = export_model(_Outputs(), (x,), [DynamicDim(((0, 0),), 3, 8)])
    assert output_specs(bounded) == [
        TensorSpec((DimSpec(6, 16), DimSpec(3, 3)), "float32", name="output_0"),
        TensorSpec((DimSpec(2, 7), DimSpec(3, 3)), "int32", name="output_1"),
        TensorSpec((DimSpec(3, 8),), "float32", name="output_2"),
    ]
    # No upper bound given: torch.export's int_oo is recorded as unbounded (max None).
    unbounded = torch.export.export(_Outputs(), (x,), dynamic_shapes=({0: torch.export.Dim("n", min=3)},), strict=False)
    assert [spec.dims[0] for spec in output_specs(unbounded)] == [DimSpec(6, None), DimSpec(2, None), DimSpec(3, None)]


class _NotAllTensors(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[object, ...]:
        return x * 2.0, None, x.shape[0]


def test_outputs_are_not_recorded_when_one_is_not_a_tensor():
    """Recording the tensors alone would misnumber them: nothing is recorded."""
    program = export_model(_NotAllTensors(), (torch.randn(4, 3),), [DynamicDim(((0, 0),), 2, 8)])
    assert output_specs(program) == []


def test_export_compile_says_the_model_is_exported_in_eval_mode(compiled_package):
    assert "model mode" in compiled_package.cli_output and "eval (model.eval() before export" in compiled_package.cli_output


def test_a_model_in_training_mode_is_exported_in_eval_mode(tmp_path):
    """Batch norm with running statistics (mean 1, variance 4): the package normalizes
    with them, as eval does, not with the batch's own statistics, as training would."""
    from aoti_deploy.compiler.options import ExportOptions
    from aoti_deploy.compiler.pipeline import export_and_compile
    from aoti_deploy.models.example import IdentitySource
    from aoti_deploy.runtime.aoti import load_package

    norm = torch.nn.BatchNorm2d(3, affine=False)
    norm.running_mean.fill_(1.0)
    norm.running_var.fill_(4.0)
    model = torch.nn.Sequential(norm, torch.nn.Dropout(0.5)).train()
    source = IdentitySource(batch=2, channels=3, height=4, width=5, model=model)
    result = export_and_compile(source, ExportOptions(), tmp_path / "m.pt2")
    assert result.passed and result.written, result.checks
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(1))
    (y,) = load_package(result.package_path, result.spec).run([x])
    torch.testing.assert_close(y, (x - 1.0) / (4.0 + norm.eps) ** 0.5)


def test_an_unbounded_dim_is_recorded_inspected_and_run_as_unbounded(build, tmp_path):
    """export_compile --dynamic-dim 0.0=1: (no MAX) records dim 0 as unbounded ("max":
    null, schema 3), both inspects print it so, and both runners take a batch far past
    the bounded packages' ranges, with the same bits."""
    import json

    from typer.testing import CliRunner

    from conftest import _export_model_package, run_cmd
    from aoti_deploy.cli.main import app as cli_app
    from aoti_deploy.cli.run_inference import app as run_inference_app
    from aoti_deploy.package.archive import read_package_metadata
    from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors

    package = _export_model_package(tmp_path, [
        "--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
        "--dynamic-dim", "0.0=1:"]).path
    document = json.loads(read_package_metadata(package)["aoti_deploy.spec"])
    assert document["schema_version"] == 3
    assert document["inputs"][0]["dims"] == [{"min": 1, "max": None}, {"min": 16, "max": 16}]
    assert [o["dims"][0] for o in document["outputs"]] == [{"min": 1, "max": None}] * 2

    python_inspect = CliRunner().invoke(cli_app, ["inspect", str(package)])
    assert python_inspect.exit_code == 0, python_inspect.output
    cpp_inspect = run_cmd(build.runner, package, "--inspect")
    assert cpp_inspect.returncode == 0, cpp_inspect.stderr
    spec = read_package_spec(package)
    named = [f"{t.name}  " if t.name else "" for t in (spec.inputs[0], spec.outputs[1])]
    for row in (f"input[0]: {named[0]}[1..unbounded, 16] float32", f"output[1]: {named[1]}[1..unbounded] float32",
                "spec: schema 3"):
        assert row in cpp_inspect.stdout.splitlines(), cpp_inspect.stdout
        assert row.split(": ", 1)[1] in python_inspect.output, python_inspect.output
    as_json = CliRunner().invoke(cli_app, ["inspect", str(package), "--json"])
    assert json.loads(as_json.output)["inputs"][0]["dims"][0] == {"min": 1, "max": None}

    generator = torch.Generator().manual_seed(5)
    inputs = [torch.randn(1000, 16, generator=generator), torch.randn(16, generator=generator)]
    save_tensors(tmp_path / "inputs.pt", inputs)
    python_run = CliRunner().invoke(run_inference_app, [str(package), "--inputs", str(tmp_path / "inputs.pt"),
                                                        "--outputs", str(tmp_path / "py.pt")])
    assert python_run.exit_code == 0, python_run.output
    cpp_run = run_cmd(build.runner, package, "--inputs", tmp_path / "inputs.pt", "--outputs", tmp_path / "cpp.pt")
    assert cpp_run.returncode == 0, cpp_run.stdout + cpp_run.stderr
    py_outputs, cpp_outputs = load_tensors(tmp_path / "py.pt"), load_tensors(tmp_path / "cpp.pt")
    assert [o.shape for o in py_outputs] == [(1000, 16), (1000,)]
    for py, cpp in zip(py_outputs, cpp_outputs):
        assert torch.equal(py.view(torch.int32), cpp.view(torch.int32))
    scale = torch.randn(16, generator=torch.Generator().manual_seed(0))  # the model's parameter
    torch.testing.assert_close(py_outputs[0], torch.relu(inputs[0] * scale + inputs[1]))
    # Below the minimum: refused in both, with the unbounded range in the message.
    save_tensors(tmp_path / "empty.pt", [torch.randn(0, 16), inputs[1]])
    refused = run_cmd(build.runner, package, "--inputs", tmp_path / "empty.pt")
    assert refused.returncode != 0
    assert "dim 0 expected a size >= 1, got 0" in refused.stdout + refused.stderr

