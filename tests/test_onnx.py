"""The ONNX deploy target: export_compile onnx in both modes, the files checked with
onnx.checker and run in onnxruntime bit for bit against eager, run_inference on .onnx
files, and the errors for what ONNX cannot take.

Skipped with the reason when the ONNX extra is missing; scripts/test.sh installs it
and sets AOTI_DEPLOY_REQUIRE_ONNX=1, which turns a missing extra into a failure."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.cli.run_inference import app as run_inference_app
from aoti_deploy.models.identity import IdentityModel
from aoti_deploy.runtime.onnx_extra import missing_onnx_packages
from aoti_deploy.verify.special_values import special_values
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import bit_view

from conftest import Build, run_cmd

_MISSING = missing_onnx_packages()
_REQUIRED = os.environ.get("AOTI_DEPLOY_REQUIRE_ONNX") == "1"
pytestmark = pytest.mark.skipif(
    bool(_MISSING) and not _REQUIRED,
    reason=f"the ONNX extra is not installed ({', '.join(_MISSING)}); pip install -e '.[onnx]'",
)


@pytest.fixture(autouse=True)
def _onnx_extra() -> None:
    """With AOTI_DEPLOY_REQUIRE_ONNX=1 (scripts/test.sh), a missing extra fails each test."""
    if _MISSING:
        pytest.fail(f"AOTI_DEPLOY_REQUIRE_ONNX=1, but the ONNX extra is missing ({', '.join(_MISSING)}): "
                    "install it with pip install -e '.[onnx]'")

# The files are exported at this shape with batch, height and width dynamic, and run
# at RUN_SHAPE, so a file specialised to its example shape cannot pass.
EXPORT_SHAPE = (2, 3, 8, 12)
RUN_SHAPE = (3, 3, 5, 7)


@dataclass(frozen=True)
class OnnxFile:
    path: Path
    exit_code: int
    output: str


def _export(out: Path, *args: str) -> OnnxFile:
    batch, channels, height, width = EXPORT_SHAPE
    result = CliRunner().invoke(
        export_compile_app,
        ["onnx", "--batch", str(batch), "--channels", str(channels), "--height", str(height), "--width", str(width),
         "--dynamic", "batch,height,width", "--batch-range", "1:8", "--height-range", "1:64",
         "--width-range", "1:64", "-o", str(out), "--no-show-graph", *args],
    )
    return OnnxFile(out, result.exit_code, result.output)


@pytest.fixture(scope="session")
def onnx_files(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> dict[str, OnnxFile]:
    """One export per mode (float32), and a portable float16 one, through the CLI."""
    out = tmp_path_factory.mktemp("onnx")
    return {
        "portable": _export(out / "portable.onnx", "--op-lib", str(op_library)),
        "custom-domain": _export(out / "custom.onnx", "--onnx-mode", "custom-domain", "--op-lib", str(op_library)),
        "portable-float16": _export(out / "portable16.onnx", "--dtype", "float16", "--op-lib", str(op_library)),
    }


def _inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return [torch.randn(RUN_SHAPE, generator=generator).to(dtype), special_values(RUN_SHAPE, dtype, seed=5)]


def _eager(x: torch.Tensor) -> torch.Tensor:
    model = IdentityModel(RUN_SHAPE[1]).to(x.dtype).eval()
    with torch.no_grad():
        return model(x)


@pytest.mark.parametrize("name", ["portable", "custom-domain", "portable-float16"])
def test_export_passes_its_own_bitwise_verification(onnx_files, name):
    exported = onnx_files[name]
    assert exported.exit_code == 0, exported.output
    assert "verify eager vs onnxruntime: PASSED (bit-identical)" in exported.output
    # The second check runs other sizes in the dynamic ranges.
    assert "eager vs onnxruntime [1, 3, 1, 1]" in exported.output


@pytest.mark.parametrize("name", ["portable", "portable-float16"])
def test_portable_file_is_standard_onnx_and_passes_the_full_checker(onnx_files, name):
    import onnx

    model = onnx.load(str(onnx_files[name].path))
    onnx.checker.check_model(model, full_check=True)
    assert {opset.domain for opset in model.opset_import} <= {"", "ai.onnx"}
    assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
    # batch, height and width stay symbolic; channels are fixed.
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in dims] == [True, False, True, True]
    assert dims[1].dim_value == 3


@pytest.mark.parametrize(("name", "dtype"), [("portable", torch.float32), ("portable-float16", torch.float16)])
def test_portable_file_runs_bit_exact_in_plain_onnxruntime(onnx_files, name, dtype):
    """A bare onnxruntime session, none of the toolkit's code: any runtime runs the file."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(onnx_files[name].path), providers=["CPUExecutionProvider"])
    for x in _inputs(dtype):
        out = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        expected = _eager(x)
        assert out.dtype == dtype and out.shape == expected.shape
        assert torch.equal(bit_view(out), bit_view(expected))


def test_custom_domain_file_has_my_ops_nodes_with_the_class_state_as_attribute(onnx_files):
    import onnx

    model = onnx.load(str(onnx_files["custom-domain"].path))
    onnx.checker.check_model(model)
    nodes = {(node.domain, node.op_type): node for node in model.graph.node}
    assert ("my_ops", "identity_conv_op") in nodes
    class_node = nodes[("my_ops", "identity_conv_class_forward")]
    assert {a.name: onnx.helper.get_attribute_value(a) for a in class_node.attribute} == {"channels": 3}
    assert {opset.domain for opset in model.opset_import} >= {"my_ops"}


def test_plain_onnxruntime_cannot_run_the_custom_domain_file(onnx_files):
    """What the README says: without implementations of the my_ops nodes, it does not load."""
    import onnxruntime

    with pytest.raises(Exception, match="my_ops"):
        onnxruntime.InferenceSession(str(onnx_files["custom-domain"].path), providers=["CPUExecutionProvider"])


def test_custom_domain_file_runs_bit_exact_with_the_op_library_kernels(onnx_files):
    from aoti_deploy.runtime.onnx_runtime import load_onnx, read_onnx_spec

    path = onnx_files["custom-domain"].path
    spec = read_onnx_spec(path)
    assert spec.onnx_mode == "custom-domain"
    assert [str(op) for op in spec.required_ops] == ["my_ops::identity_conv_class_forward", "my_ops::identity_conv_op"]
    assert spec.op_libraries == ["libidentity_conv_ops.so"]
    session = load_onnx(path, spec)
    for x in _inputs(torch.float32):
        (out,) = session.run([x])
        assert torch.equal(bit_view(out), bit_view(_eager(x)))


def test_custom_domain_kernels_are_the_op_librarys(onnx_files):
    """The my_ops nodes really call the library's kernels: a wrong channel count in the
    node's attribute reaches the class's own check."""
    import onnx

    from aoti_deploy.runtime.onnx_runtime import load_onnx, read_onnx_spec
    from aoti_deploy.errors import PackageError

    path = onnx_files["custom-domain"].path
    model = onnx.load(str(path))
    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "channels":
                attribute.i = 4
    edited = path.with_name("custom_channels4.onnx")
    onnx.save(model, str(edited))
    session = load_onnx(edited, read_onnx_spec(edited))
    with pytest.raises(PackageError, match=r"expected an input of shape \[N, 4"):
        session.run([torch.randn(RUN_SHAPE)])


@pytest.mark.parametrize("name", ["portable", "custom-domain"])
def test_run_inference_runs_onnx_files_with_tensor_files_and_expected(onnx_files, op_library, tmp_path, name):
    path = onnx_files[name].path
    x = special_values(RUN_SHAPE, torch.float32, seed=9)
    inputs = save_tensors(tmp_path / "in.pt", [x])
    expected = save_tensors(tmp_path / "expected.pt", [_eager(x)])
    result = CliRunner().invoke(
        run_inference_app,
        [str(path), str(op_library), "--inputs", str(inputs), "--outputs", str(tmp_path / "out.pt"),
         "--expected", str(expected)],
    )
    assert result.exit_code == 0, result.output
    assert "runtime: onnxruntime (CPU)" in result.output
    assert "verify: output[0] vs expected[0] (bitwise): identical" in result.output
    assert result.output.rstrip().endswith("PASSED")
    (written,) = torch.load(tmp_path / "out.pt")
    assert torch.equal(bit_view(written), bit_view(_eager(x)))


def test_run_inference_on_onnx_flags_a_bit_difference_with_exit_1(onnx_files, tmp_path):
    x = torch.randn(RUN_SHAPE)
    wrong = _eager(x).clone()
    wrong.view(torch.int32)[0, 0, 0, 0] ^= 1
    result = CliRunner().invoke(
        run_inference_app,
        [str(onnx_files["portable"].path), "--inputs", str(save_tensors(tmp_path / "in.pt", [x])),
         "--expected", str(save_tensors(tmp_path / "wrong.pt", [wrong]))],
    )
    assert result.exit_code == 1, result.output
    assert "1 of 315 elements differ" in result.output and "FAILED" in result.output


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (torch.randn(2, 4, 5, 7), "input[0] (x): dim 1 expected 3, got 4"),
        (torch.randn(9, 3, 5, 7), "input[0] (x): dim 0 expected a size in [1, 8], got 9"),
        (torch.randn(2, 3, 5, 7, dtype=torch.float64), "input[0] (x): expected dtype float32, got float64"),
        (torch.randn(3, 5, 7), "input[0] (x): expected rank 4"),
    ],
)
def test_run_inference_on_onnx_refuses_bad_inputs_clearly(onnx_files, tmp_path, tensor, message):
    result = CliRunner().invoke(
        run_inference_app,
        [str(onnx_files["portable"].path), "--inputs", str(save_tensors(tmp_path / "bad.pt", [tensor]))],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_run_inference_on_damaged_or_missing_onnx_files(tmp_path, onnx_files):
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(onnx_files["portable"].path.read_bytes()[:40])
    for path, message in [
        (damaged, "is damaged or is not an ONNX model"),
        (tmp_path / "missing.onnx", "ONNX file not found"),
    ]:
        result = CliRunner().invoke(run_inference_app, [str(path)])
        assert result.exit_code == 2, result.output
        assert message in result.output and "export_compile onnx" in result.output


def test_the_cpp_runner_points_onnx_files_to_onnxruntime(build: Build, onnx_files):
    result = run_cmd(build.runner, onnx_files["portable"].path)
    assert result.returncode == 2
    assert "this is an ONNX file, not an AOTI package" in result.stderr
    assert "run_inference" in result.stderr


def test_an_op_that_writes_its_argument_is_refused_by_both_modes_alike(tmp_path, op_library):
    """The out= variant's op has no portable translation and mutates, so the
    custom-domain mode refuses it too: neither error points to the other mode."""
    message = ("my_ops::identity_conv_op_out writes its argument 'out' in place, and ONNX has no in-place ops: "
               "neither ONNX mode (portable or custom-domain) can export it")
    for mode in ("portable", "custom-domain"):
        result = _export(tmp_path / "out.onnx", "--variant", "out", "--onnx-mode", mode, "--op-lib", str(op_library))
        assert result.exit_code == 2, result.output
        assert message in result.output and "--variant functional" in result.output
        assert "export in the custom-domain mode" not in result.output
    assert not (tmp_path / "out.onnx").exists()


def test_an_op_without_translation_is_named(op_library, monkeypatch):
    """A functional op with no portable translation: the error names it, with the
    registration call to add (or the custom-domain mode, which does take it)."""
    from aoti_deploy.compiler import onnx_translations
    from aoti_deploy.compiler.onnx_export import prepare_onnx
    from aoti_deploy.errors import ExportError

    monkeypatch.setattr(onnx_translations, "_PORTABLE", {})
    with pytest.raises(ExportError, match=r"no ONNX translation for the custom op\(s\) "
                                          r"my_ops::identity_conv_class_forward, my_ops::identity_conv_op\. Register one .*register_onnx_translation.*custom-domain mode"):
        prepare_onnx(IdentityModel(3).eval(), [torch.randn(EXPORT_SHAPE)])


def test_a_torchbind_class_without_route_is_named(op_library, monkeypatch):
    from aoti_deploy.compiler import onnx_translations
    from aoti_deploy.errors import ExportError
    from aoti_deploy.compiler.onnx_export import prepare_onnx

    monkeypatch.setattr(onnx_translations, "_CLASS_ROUTES", {})
    model = IdentityModel(3).eval()
    with pytest.raises(ExportError, match=r"class my_ops::IdentityConvClass \(attribute 'layer2'\), which has no ONNX route"):
        prepare_onnx(model, [torch.randn(EXPORT_SHAPE)])
    # The model is left as it was.
    assert isinstance(model.layer2, torch.ScriptObject)


@pytest.mark.parametrize(
    ("dtype", "mode", "message"),
    [
        ("bfloat16", "portable", "numpy, through which onnxruntime takes its inputs, has no bfloat16"),
        ("float64", "portable", "onnxruntime's CPU execution provider has no kernel for an op at this dtype"),
        ("float16", "custom-domain", "onnxruntime-extensions' Python ops, which run such nodes here, take float32 "
                                     "and float64 only"),
    ],
)
def test_dtypes_onnx_or_onnxruntime_cannot_run_get_a_clear_error(tmp_path, op_library, dtype, mode, message):
    """Exit 2 writes nothing: not the file, nor its temporary copy beside it."""
    output = tmp_path / "out" / f"{dtype}.onnx"
    result = _export(output, "--dtype", dtype, "--onnx-mode", mode, "--op-lib", str(op_library))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not output.exists() and not [p for p in output.parent.glob("*") if p.suffix == ".onnx"], result.output


def test_custom_domain_float_attributes_must_be_exact_in_float32(build: Build, op_library, tmp_path):
    """extra_ops::affine(x, scale, shift): in the custom-domain mode its floats become
    node attributes, which ONNX stores as float32. 0.25 is exact and runs bit-exact;
    0.1 is refused there."""
    common = ["onnx", "--onnx-mode", "custom-domain", "--model", "examples.user_models:two_library_model",
              "--op-lib", str(build.op_library), "--op-lib", str(build.extra_op_library),
              "--fake-module", "examples.extra_ops_fakes", "--no-show-graph"]
    exact = CliRunner().invoke(export_compile_app, [*common, "--model-arg", "shift=0.25", "-o", str(tmp_path / "a.onnx")])
    assert exact.exit_code == 0, exact.output
    assert "extra_ops.affine" in exact.output and "PASSED (bit-identical)" in exact.output
    inexact = CliRunner().invoke(export_compile_app, [*common, "--model-arg", "shift=0.1", "-o", str(tmp_path / "b.onnx")])
    assert inexact.exit_code == 2
    assert "shift=0.1 has no exact float32 value" in inexact.output
    # The portable mode uses the translation examples/extra_ops_fakes.py registers
    # (Mul then Add), which keeps the kernel's bits even for 0.1.
    portable = CliRunner().invoke(export_compile_app, [*common[:1], *common[3:], "--model-arg", "shift=0.1",
                                                       "-o", str(tmp_path / "c.onnx")])
    assert portable.exit_code == 0, portable.output
    assert "ai.onnx.Mul, ai.onnx.Add, ai.onnx.Mul" in portable.output
    assert "PASSED (bit-identical)" in portable.output


def test_inspect_package_reads_onnx_files(onnx_files):
    import json

    from aoti_deploy.cli.main import app as cli_app

    result = CliRunner().invoke(cli_app, ["inspect", str(onnx_files["custom-domain"].path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["onnx_mode"] == "custom-domain"
    assert data["inputs"][0]["dims"][1] == {"min": 3, "max": 3}
    assert data["inputs"][0]["dims"][0] == {"min": 1, "max": 8}
    # An identity: the same specs, under the model's own names.
    assert [{**t, "name": ""} for t in data["outputs"]] == [{**t, "name": ""} for t in data["inputs"]]
    assert (data["inputs"][0]["name"], data["outputs"][0]["name"]) == ("x", "output")
    assert data["is_identity"] is True
    assert [op["name"] for op in data["required_ops"]] == ["my_ops::identity_conv_class_forward", "my_ops::identity_conv_op"]


def test_the_parity_matrix_onnx_column(parity_matrix):
    """float32 and float16: the portable file in onnxruntime has eager's bits in every
    cell, special values included. bfloat16 and float64: n/a, with the reason."""
    from aoti_deploy.bench.parity import ONNX_PAIR, cell_passed

    _, results = parity_matrix
    for cell in results:
        if cell.dtype in ("float32", "float16"):
            assert ONNX_PAIR in cell.pairs, (cell.dtype, cell.shapes, cell.onnx_skipped)
            assert cell.pairs[ONNX_PAIR].identical, (cell.dtype, cell.shapes, cell.input_kind, str(cell.pairs[ONNX_PAIR]))
        else:
            assert ONNX_PAIR not in cell.pairs
            assert {"bfloat16": "no bfloat16", "float64": "NOT_IMPLEMENTED"}[cell.dtype] in cell.onnx_skipped
        assert cell_passed(cell)


def test_a_differing_onnx_column_fails_the_cell(parity_matrix):
    from dataclasses import replace

    from aoti_deploy.bench.parity import ONNX_PAIR, cell_passed
    from aoti_deploy.verify.bits import BitReport

    _, results = parity_matrix
    cell = next(c for c in results if ONNX_PAIR in c.pairs)
    assert cell_passed(cell)
    assert not cell_passed(replace(cell, pairs={**cell.pairs, ONNX_PAIR: BitReport(False, 1, 1)}))


class _CustomOnly(torch.nn.Module):
    """Only the custom op, so special values reach a custom-domain node unchanged
    (in the IdentityModel the native conv quiets NaNs first)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.my_ops.identity_conv_op(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_custom_domain_nodes_keep_every_bit_but_quiet_signalling_nans(op_library, tmp_path, dtype):
    """The documented limit of the custom-domain mode in onnxruntime: the Python ops'
    outputs travel as Python floats (doubles), which quiets a float32 signalling NaN.
    Every other value (-0.0, NaN payloads, infinities, subnormals) keeps its bits, and
    float64 keeps all of them; so does the portable file."""
    from aoti_deploy.compiler.onnx_export import export_onnx
    from aoti_deploy.runtime.onnx_runtime import load_onnx

    x = special_values(RUN_SHAPE, dtype, seed=3)
    bits = bit_view(x)
    width = torch.finfo(dtype).bits
    mantissa = {torch.float32: 23, torch.float64: 52}[dtype]
    exponent_all_ones = ((1 << (width - 1 - mantissa)) - 1) << mantissa
    quiet_bit = 1 << (mantissa - 1)  # fits int64 for float64 too
    nan = x.isnan().flatten()  # bit_view is flat
    signalling = nan & ((bits & quiet_bit) == 0)
    assert int(signalling.sum()) > 0 and int((nan & ~signalling).sum()) > 0
    assert int((bits & exponent_all_ones)[signalling].ne(exponent_all_ones).sum()) == 0
    for mode in ("custom-domain", "portable"):
        exported = export_onnx(_CustomOnly(), [x], tmp_path / f"{mode}.onnx", mode)
        (out,) = load_onnx(exported.path, exported.spec).run([x])
        differ = bit_view(out) != bits
        if mode == "portable" or dtype == torch.float64:  # a float64 is a Python float already
            assert not differ.any()
            continue
        assert torch.equal(differ, signalling)
        assert torch.equal(bit_view(out)[signalling], bits[signalling] | quiet_bit)


def test_custom_domain_float16_is_refused_not_aborted(op_library, tmp_path):
    """onnxruntime-extensions' Python ops take no float16 (they would abort the
    process); the custom-domain file is refused with the reason instead."""
    result = _export(tmp_path / "custom16.onnx", "--dtype", "float16", "--onnx-mode", "custom-domain",
                     "--op-lib", str(op_library))
    assert result.exit_code == 2, result.output
    assert "takes float16, but onnxruntime-extensions' Python ops" in result.output
    assert "portable mode (float16 works there)" in result.output
