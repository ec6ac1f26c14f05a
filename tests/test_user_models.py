"""Bring your own model and op libraries: export_compile --model with the example
models in examples/, run in both runtimes, checked against the eager reference
(--save-reference / --expected), and Python-only ops refused before C++ sees them."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import (REPO_ROOT, Build, UserPackage, _export, _export_model_package, run_cmd,
                      run_cpp_runtime, run_python_runtime)
from aoti_deploy.cli.run_inference import app as run_inference_app
from aoti_deploy.errors import InputError, ModelError
from aoti_deploy.compiler.export import python_only_ops
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import OpRef
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
from aoti_deploy.cli.parsing import parse_dynamic_dim, parse_model_args
from aoti_deploy.models.user import flatten_outputs, load_model
from aoti_deploy.verify.bits import bit_view, compare_bits, ulp_distance
from aoti_deploy.verify.tolerance import BITWISE, ULP, Tolerance, compare

RUN_INFERENCE = Path(sys.executable).parent / "run_inference"


@pytest.fixture(scope="session")
def python_only(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """A model with a torch.library.custom_op, exported with --allow-python-ops."""
    out = tmp_path_factory.mktemp("python_only")
    code, output = _export([
        "--model", "examples.python_op_model:python_op_model", "--input-shape", "2,5",
        "--allow-python-ops", "--save-reference", str(out / "ref"), "--output", str(out / "model.pt2"),
    ])
    assert code == 0, output
    return UserPackage(out / "model.pt2", out / "ref", code, output)


def _run_both(build: Build, package: Path, libs: list[Path], inputs: Path, expected: Path, out: Path,
              *extra: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """run_inference (in-process) and aoti_runner (subprocess) on the same files."""
    py_args = [str(package), *map(str, libs), "--inputs", str(inputs), "--expected", str(expected),
               "--outputs", str(out / "py.pt"), *extra]
    py = CliRunner().invoke(run_inference_app, py_args)
    cpp = run_cmd(build.runner, package, *libs, "--inputs", inputs, "--expected", expected,
                  "--outputs", out / "cpp.pt", *extra)
    assert "terminate called" not in cpp.stderr
    return (py.exit_code, py.output), (cpp.returncode, cpp.stdout + cpp.stderr)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(width), b.view(width))


def _verify_lines(output: str) -> list[str]:
    return [line for line in output.splitlines()
            if line.startswith(("verify:", "runtime parity:", "compiled vs eager:", "identity:", "PASSED", "FAILED"))]


# --- the two-input, two-output model --------------------------------------------------

def test_scale_shift_package_records_every_input(scale_shift):
    spec = read_package_spec(scale_shift.path)
    assert [s.shape_str() for s in spec.inputs] == ["[1..64, 16]", "[16]"]
    # relu(x * scale + y) has x's shape; the row sums drop the feature dim.
    assert [(s.shape_str(), s.dtype) for s in spec.outputs] == [("[1..64, 16]", "float32"), ("[1..64]", "float32")]
    assert spec.example_shapes == [(4, 16), (16,)]
    assert spec.required_ops == [] and not spec.is_identity and spec.python_only_ops == []
    # Loaded in this process, but not used by the model: not recorded.
    assert spec.op_libraries == []


def _check_rows(output: str) -> dict[str, bool]:
    """The summary's "eager vs package ..." rows: label -> says identical."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 2 and cells[1].startswith("eager vs package"):
            rows[cells[1]] = cells[2] == "identical"
    return rows


def test_scale_shift_export_report_matches_the_bits(scale_shift):
    """Each row says identical exactly when the bits are; the verdict and the exit
    code follow all rows (the example shape and the second, dynamic one)."""
    inputs = load_tensors(scale_shift.reference / "inputs.pt")
    expected = load_tensors(scale_shift.reference / "eager.pt")
    model, _ = load_model("examples.user_models:scale_shift_model")
    with torch.no_grad():
        eager = flatten_outputs(model(*inputs))
    assert len(expected) == 2 and all(_bits_equal(e, x) for e, x in zip(expected, eager))
    package = torch._inductor.aoti_load_package(str(scale_shift.path))
    compiled = flatten_outputs(package(*inputs))
    rows = _check_rows(scale_shift.output)
    assert len(rows) == 4, scale_shift.output  # 2 outputs x (example shape, second shape)
    for j, (c, e) in enumerate(zip(compiled, expected)):
        assert rows[f"eager vs package [4, 16] [16] output[{j}] (rtol 1.3e-06, atol 1e-05)"] == _bits_equal(c, e)
    identical = all(rows.values())
    assert ("(bit-identical)" in scale_shift.output) == identical, scale_shift.output
    assert ("NOT bit-identical, within rtol 1.3e-06, atol 1e-05" in scale_shift.output) == (not identical)
    assert scale_shift.exit_code == 0


def test_scale_shift_runs_in_both_runtimes_with_the_same_bits(scale_shift, build, tmp_path):
    """Against eager's outputs with --expected (bitwise), both runtimes print the same
    report and exit code, PASSED only if the bits equal eager's; their outputs have
    identical bits."""
    inputs, expected = scale_shift.reference / "inputs.pt", scale_shift.reference / "eager.pt"
    (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, scale_shift.path, [], inputs, expected, tmp_path)
    py_outputs, cpp_outputs = load_tensors(tmp_path / "py.pt"), load_tensors(tmp_path / "cpp.pt")
    assert len(py_outputs) == len(cpp_outputs) == 2
    assert all(_bits_equal(p, c) for p, c in zip(py_outputs, cpp_outputs))
    identical = all(_bits_equal(p, e) for p, e in zip(py_outputs, load_tensors(expected)))
    assert py_code == cpp_code == (0 if identical else 1), py_out + cpp_out
    assert _verify_lines(py_out) == _verify_lines(cpp_out)


def test_scale_shift_dynamic_batch_in_both_runtimes(scale_shift, build, tmp_path):
    generator = torch.Generator().manual_seed(3)
    inputs = save_tensors(tmp_path / "in.pt", [torch.randn(37, 16, generator=generator), torch.randn(16)])
    py = CliRunner().invoke(run_inference_app, [str(scale_shift.path), "--inputs", str(inputs),
                                                "--outputs", str(tmp_path / "py.pt")])
    cpp = run_cmd(build.runner, scale_shift.path, "--inputs", inputs, "--outputs", tmp_path / "cpp.pt")
    assert py.exit_code == 0 and "DONE" in py.output, py.output
    assert cpp.returncode == 0 and "DONE" in cpp.stdout, cpp.stdout + cpp.stderr
    py_outputs, cpp_outputs = load_tensors(tmp_path / "py.pt"), load_tensors(tmp_path / "cpp.pt")
    assert [list(t.shape) for t in cpp_outputs] == [[37, 16], [37]]
    assert all(_bits_equal(p, c) for p, c in zip(py_outputs, cpp_outputs))


@pytest.mark.parametrize(
    "tensors, message",
    [
        ([torch.randn(65, 16), torch.randn(16)], "input[0] (x): dim 0 expected a size in [1, 64], got 65"),
        ([torch.randn(4, 16), torch.randn(15)], "input[1] (y): dim 0 expected 16, got 15"),
        ([torch.randn(4, 16)], "wrong number of inputs: the package expects 2, got 1"),
    ],
)
def test_scale_shift_bad_inputs_are_refused_by_both_runtimes(scale_shift, build, tmp_path, tensors, message):
    inputs = save_tensors(tmp_path / "in.pt", tensors)
    py = CliRunner().invoke(run_inference_app, [str(scale_shift.path), "--inputs", str(inputs)])
    cpp = run_cmd(build.runner, scale_shift.path, "--inputs", inputs)
    assert py.exit_code == 2 and message in py.output, py.output
    assert cpp.returncode == 2 and message in cpp.stderr, cpp.stderr


def test_ulp_tolerance_is_reported_exactly_by_both_runtimes(scale_shift, build, tmp_path):
    """An expected file 3 ULP off in one element, and -0.0 against +0.0 in another:
    both runtimes count the differing bits, report 3 ULP, fail at --max-ulp 2 and
    pass (saying the bits differ) at --max-ulp 3."""
    inputs = scale_shift.reference / "inputs.pt"
    outputs = torch._inductor.aoti_load_package(str(scale_shift.path))(*load_tensors(inputs))
    relu_out, row_sums = [t.clone() for t in flatten_outputs(outputs)]
    # Three representable values further from zero: same sign, still finite.
    assert row_sums[0] != 0
    row_sums.view(torch.int32)[0] += 3
    # relu gives exact +0.0s (all-zero bits); one becomes -0.0.
    zeros = (relu_out.view(torch.int32).flatten() == 0).nonzero()
    assert len(zeros) > 0
    relu_out.view(-1)[int(zeros[0])] = -0.0
    expected = save_tensors(tmp_path / "expected.pt", [relu_out, row_sums])
    for max_ulp, code, verdict in (("2", 1, "FAILED"), ("3", 0, "PASSED (NOT bit-identical")):
        (py_code, py_out), (cpp_code, cpp_out) = _run_both(
            build, scale_shift.path, [], inputs, expected, tmp_path, "--max-ulp", max_ulp)
        for out, got in ((py_out, py_code), (cpp_out, cpp_code)):
            assert got == code, out
            assert f"verify: output[1] vs expected[1] (within {max_ulp} ULP): 1 of 4 elements differ" in out, out
            assert "max ULP distance 3" in out, out
            # Only the zero's sign differs: different bits at distance 0.
            assert f"verify: output[0] vs expected[0] (within {max_ulp} ULP): 1 of 64 elements differ" in out, out
            assert "max abs diff 0, max rel diff 0, max ULP distance 0" in out, out
            assert verdict in out, out
        assert _verify_lines(py_out) == _verify_lines(cpp_out)


# --- a model with custom ops from two libraries ---------------------------------------

def test_two_library_export_verifies_and_records_both_libraries(two_library):
    assert two_library.exit_code == 0, two_library.output
    assert "verify eager vs package: PASSED (bit-identical)" in two_library.output
    spec = read_package_spec(two_library.path)
    assert [str(op) for op in spec.required_ops] == ["extra_ops::affine", "my_ops::identity_conv_op"]
    assert spec.op_libraries == ["libextra_ops.so", "libidentity_conv_ops.so"]
    assert spec.fake_modules == ["examples.extra_ops_fakes"]
    assert [s.shape_str() for s in spec.inputs] == ["[1..16, 3, 8, 8]"]


def test_two_library_model_arg_reaches_the_factory(two_library):
    inputs = load_tensors(two_library.reference / "inputs.pt")
    expected = load_tensors(two_library.reference / "expected.pt")
    # shift=0.25 from --model-arg, scale 0.5 by default: (x * 0.5 + 0.25) * 2.
    assert _bits_equal(expected[0], (inputs[0].mul(0.5).add(0.25)) * 2.0)


@pytest.mark.parametrize("style", ["positional", "--op-lib"])
def test_two_library_runs_in_both_runtimes(two_library, build, tmp_path, style):
    inputs, expected = two_library.reference / "inputs.pt", two_library.reference / "expected.pt"
    libs = [build.op_library, build.extra_op_library]
    if style == "positional":
        (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, two_library.path, libs, inputs, expected, tmp_path)
    else:
        extra = ["--op-lib", str(build.extra_op_library)]
        (py_code, py_out), (cpp_code, cpp_out) = _run_both(
            build, two_library.path, [build.op_library], inputs, expected, tmp_path, *extra)
    assert py_code == 0 and "verify: output[0] vs expected[0] (bitwise): identical" in py_out, py_out
    assert cpp_code == 0 and "verify: output[0] vs expected[0] (bitwise): identical" in cpp_out, cpp_out
    assert _bits_equal(load_tensors(tmp_path / "py.pt")[0], load_tensors(tmp_path / "cpp.pt")[0])


def test_two_library_without_the_second_library_is_a_clear_error(two_library, build, tmp_path):
    """Each missing op is named with the library that defines it, in the same words
    by both runners; with neither library loaded, both are named, each for its op."""
    assert read_package_spec(two_library.path).op_library_namespaces == {
        "libextra_ops.so": ["extra_ops"], "libidentity_conv_ops.so": ["my_ops"]}
    unrelated = Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so"
    cases = {
        build.op_library: "what the package needs: op extra_ops::affine, defined in libextra_ops.so. Pass",
        unrelated: "what the package needs: op extra_ops::affine, defined in libextra_ops.so; op "
                   "my_ops::identity_conv_op, defined in libidentity_conv_ops.so. Pass",
    }
    for library, needs in cases.items():
        cpp = run_cmd(build.runner, two_library.path, library)
        assert cpp.returncode == 2 and needs in cpp.stderr, cpp.stdout + cpp.stderr
        # A fresh Python process: this one has libextra_ops.so loaded already.
        py = run_cmd(RUN_INFERENCE, two_library.path, library)
        assert py.returncode == 2 and needs in py.stderr, py.stdout + py.stderr
        assert py.stderr.strip().removeprefix("error: ") == cpp.stderr.strip().removeprefix("aoti_runner: error: ")


# --- Python-only ops --------------------------------------------------------------------

def test_python_only_op_is_refused_at_export(tmp_path):
    package = tmp_path / "model.pt2"
    code, output = _export(["--model", "examples.python_op_model:python_op_model", "--input-shape", "2,5",
                            "--output", str(package)])
    assert code == 2, output
    assert "python_only_example::double" in output and "no Python" in output and "--allow-python-ops" in output
    assert not package.exists()


def test_python_only_package_is_refused_up_front_by_the_cpp_runner(python_only, build):
    assert read_package_spec(python_only.path).python_only_ops == ["python_only_example::double"]
    cpp = run_cmd(build.runner, python_only.path, build.op_library)
    assert cpp.returncode == 2, cpp.stdout + cpp.stderr
    assert "python_only_example::double, which only Python can run" in cpp.stderr
    assert cpp.stdout == ""  # refused before loading anything


def test_python_only_package_runs_in_python_with_its_module(python_only):
    ref = python_only.reference
    args = [python_only.path, "--inputs", ref / "inputs.pt", "--expected", ref / "expected.pt"]
    without = run_cmd(RUN_INFERENCE, *args, cwd=REPO_ROOT)
    assert without.returncode == 2 and "--fake-module" in without.stderr, without.stderr
    assert "examples.python_op_model" in without.stderr
    with_module = run_cmd(RUN_INFERENCE, *args, "--fake-module", "examples.python_op_model", cwd=REPO_ROOT)
    assert with_module.returncode == 0, with_module.stdout + with_module.stderr
    assert "verify: output[0] vs expected[0] (bitwise): identical" in with_module.stdout


def test_python_only_ops_detection(op_library):
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (Python-defined ops Inductor compiles)

    from aoti_deploy.compiler.export import GraphCalls

    sys.path.insert(0, str(REPO_ROOT))
    import examples.python_op_model  # noqa: F401  (registers python_only_example::double)

    def calls(*overloads):
        return GraphCalls([f"{o.namespace}::{o._opname}" for o in overloads], [],
                          {f"{o.namespace}::{o._opname}": [o] for o in overloads}).op_refs()

    assert python_only_ops(calls(torch.ops.my_ops.identity_conv_op.default), "cpu") == {}
    # Defined from Python, but Inductor compiles it into its own kernels: exempt.
    assert python_only_ops(calls(torch.ops.quantized_decomposed.quantize_per_tensor.default), "cpu") == {}
    # A C++ op whose only CPU kernel is C++ under another key (QuantizedCPU): not Python-only.
    assert python_only_ops(calls(torch.ops.quantized.add.default), "cpu") == {}
    found = python_only_ops(calls(torch.ops.python_only_example.double.default,
                                  torch.ops.my_ops.identity_conv_op.default), "cpu")
    assert list(found) == ["python_only_example::double"]
    assert "defined from Python" in found["python_only_example::double"]


def test_dispatch_dump_format(op_library):
    """python_only_ops reads torch._C._dispatch_dump, a debug format and no API. This
    pins the two lines it reads, on each torch version CI runs (2.13.0 and 2.14.1): the
    schema's "debug: registered at FILE:LINE", and one "KEY: registered at FILE:LINE"
    line per kernel, for a C++ op and for one defined from Python."""
    from aoti_deploy.compiler.export import dispatch_dump

    sys.path.insert(0, str(REPO_ROOT))
    import examples.python_op_model  # noqa: F401  (registers python_only_example::double)

    cpp = dispatch_dump(OpRef("my_ops::identity_conv_op"))
    assert re.search(r"^debug: registered at .+\.cpp:\d+", cpp, re.MULTILINE), cpp
    assert re.search(r"^CPU: registered at .+\.cpp:\d+", cpp, re.MULTILINE), cpp
    python = dispatch_dump(OpRef("python_only_example::double"))
    assert re.search(r"^debug: registered at .+\.py:\d+", python, re.MULTILINE), python


def test_scalar_input_and_named_overload_in_both_runtimes(build, op_library, tmp_path):
    """A 0-d input (its example shape is []) and an op with only a named overload
    (extra_ops::scale.Tensor): the package records the overload, both runtimes accept
    it, draw random inputs of the recorded shapes and give the same bits."""
    out = tmp_path / "scalar"
    code, output = _export([
        "--model", "examples.user_models:scalar_scale_model", "--input-shape", "", "--input-shape", "2,3",
        "--op-lib", str(build.extra_op_library), "--fake-module", "examples.extra_ops_fakes",
        "--output", str(out / "model.pt2"),
    ])
    assert code == 0, output
    spec = read_package_spec(out / "model.pt2")
    assert [str(op) for op in spec.required_ops] == ["extra_ops::scale.Tensor"]
    assert spec.example_shapes == [(), (2, 3)]
    py_code, py_out = run_python_runtime(out / "model.pt2", build.extra_op_library, None, tmp_path / "py.pt")
    cpp_code, cpp_out = run_cpp_runtime(build.runner, out / "model.pt2", build.extra_op_library, None,
                                        tmp_path / "cpp.pt")
    assert py_code == 0, py_out
    assert cpp_code == 0, cpp_out
    from aoti_deploy.package.spec import tensor_label

    first, second = (tensor_label("input", i, spec.inputs) for i in range(2))
    assert f"{first}: [] float32" in cpp_out and f"{second}: [2, 3] float32" in cpp_out, cpp_out
    (py,), (cpp,) = load_tensors(tmp_path / "py.pt"), load_tensors(tmp_path / "cpp.pt")
    assert _bits_equal(py, cpp)


def test_python_only_op_inside_torch_cond_is_refused(tmp_path):
    code, output = _export(["--model", "examples.python_op_model:cond_python_op_model", "--input-shape", "2,5",
                            "--output", str(tmp_path / "m.pt2")])
    assert code == 2 and "python_only_example::double" in output and "no Python" in output, output
    assert not (tmp_path / "m.pt2").exists()


def test_missing_fake_module_names_the_fix(build, tmp_path):
    """A fresh process, where nothing registered the fake of extra_ops::affine."""
    export_compile = Path(sys.executable).parent / "export_compile"
    result = run_cmd(export_compile, "--model", "examples.user_models:two_library_model",
                     "--op-lib", build.op_library, "--op-lib", build.extra_op_library,
                     "--output", tmp_path / "m.pt2", cwd=REPO_ROOT)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "extra_ops.affine" in result.stderr and "--fake-module" in result.stderr, result.stderr


def test_output_count_mismatch_is_reported_alike(scale_shift, build, tmp_path):
    inputs = scale_shift.reference / "inputs.pt"
    expected = save_tensors(tmp_path / "one.pt", load_tensors(scale_shift.reference / "expected.pt")[:1])
    (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, scale_shift.path, [], inputs, expected, tmp_path)
    line = "runtime parity: the package returned 2 output(s), but there are 1 expected tensor(s) to compare with"
    assert py_code == cpp_code == 1
    assert line in py_out and line in cpp_out and "FAILED" in py_out and "FAILED" in cpp_out


def test_random_inputs_refuse_complex_dtypes_alike_in_both_runtimes(build, tmp_path):
    """The same refusal, word for word, from both runtimes' random-input makers: complex
    inputs have no random values (integer and bool ones draw 0 or 1, or their recorded
    value range). (A package whose spec merely claims a complex input is refused
    earlier, by the check of the spec against the compiled model; so this runs the two
    makers on the spec.)"""
    import json

    from aoti_deploy.errors import AotiDeployError
    from aoti_deploy.package.spec import parse_document
    from aoti_deploy.runtime.random_inputs import make_random_inputs

    dims = lambda *ranges: [{"min": low, "max": high} for low, high in ranges]  # noqa: E731
    document = {"schema_version": 2, "inputs": [{"dtype": "int64", "dims": dims((1, 64), (16, 16))},
                                                 {"dtype": "complex64", "dims": dims((16, 16))}]}
    with pytest.raises(AotiDeployError) as python_error:
        make_random_inputs(parse_document(document), 0)
    vectors = tmp_path / "vectors.json"
    vectors.write_text(json.dumps({"vectors": [{"name": "complex", "spec": document, "seed": 0}]}))
    cpp = run_cmd(build.dir / "contract_vectors", "random", vectors)
    assert cpp.returncode == 0, cpp.stderr
    cpp_verdict = json.loads(cpp.stdout)["complex"]
    message = ("cannot generate a random input of dtype complex64 (random inputs are float16, bfloat16, float32, "
               "float64, or bool or integer); pass --inputs FILE.")
    assert message in str(python_error.value)
    assert cpp_verdict["error"] == "random_dtype" and message in cpp_verdict["message"], cpp_verdict


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_ulp_reports_agree_between_runtimes_in_every_dtype(parity_matrix, build, op_library, tmp_path, dtype):
    """An identity package per dtype, and an expected file with a value 2 ULP up, a
    NaN against a number, a value mirrored across zero and -0.0 against +0.0: both
    runtimes print the same report, with the ULP distance verify.py computes."""
    from aoti_deploy.package.dtypes import DTYPES
    from aoti_deploy.bench.parity import STATIC_SHAPE

    work_dir, _ = parity_matrix
    package = work_dir / f"model_{dtype}_static.pt2"
    x = torch.randn(STATIC_SHAPE, generator=torch.Generator().manual_seed(5)).to(DTYPES[dtype])
    expected = x.clone().flatten()
    expected[0] = torch.nextafter(torch.nextafter(expected[0], expected[0] * 4), expected[0] * 4)
    expected[1] = float("nan")
    expected[2] = -expected[2]
    x.view(-1)[3] = 0.0
    expected[3] = -0.0
    expected = expected.reshape(STATIC_SHAPE)
    inputs = save_tensors(tmp_path / "in.pt", [x])
    expected_file = save_tensors(tmp_path / "expected.pt", [expected])
    (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, package, [op_library], inputs, expected_file,
                                                       tmp_path, "--max-ulp", "1000000000")
    assert py_code == cpp_code == 1  # a NaN against a number is infinitely far
    assert _verify_lines(py_out) == _verify_lines(cpp_out)
    assert "4 of 576 elements differ" in cpp_out and "max ULP distance inf" in cpp_out
    finite = expected.clone()
    finite.view(-1)[1] = x.view(-1)[1]
    report = compare_bits(x, finite)
    assert report.max_ulp == ulp_distance(x.flatten()[2:3], finite.flatten()[2:3]).item()  # across zero wins
    expected_file = save_tensors(tmp_path / "expected.pt", [finite])
    (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, package, [op_library], inputs, expected_file, tmp_path)
    assert py_code == cpp_code == 1
    assert _verify_lines(py_out) == _verify_lines(cpp_out)
    assert f"max ULP distance {int(report.max_ulp)}" in cpp_out, cpp_out


def test_shared_dynamic_dim_and_nested_outputs_in_both_runtimes(pair, build, tmp_path):
    assert [s.shape_str() for s in read_package_spec(pair.path).inputs] == ["[1..32, 5]", "[1..32, 5]"]
    # sum, parts[0], parts[1]: flat, in pytree order, each of the inputs' shape.
    assert [(s.shape_str(), s.dtype) for s in read_package_spec(pair.path).outputs] == [("[1..32, 5]", "float32")] * 3
    generator = torch.Generator().manual_seed(9)
    x, y = torch.randn(11, 5, generator=generator), torch.randn(11, 5, generator=generator)
    inputs = save_tensors(tmp_path / "in.pt", [x, y])
    model, _ = load_model("examples.user_models:pair_model")
    expected = save_tensors(tmp_path / "expected.pt", flatten_outputs(model(x, y)))
    (py_code, py_out), (cpp_code, cpp_out) = _run_both(build, pair.path, [], inputs, expected, tmp_path, "--max-ulp", "4")
    assert py_code == cpp_code == 0, py_out + cpp_out
    # A dict output: each runner names the outputs by their key paths, and writes them
    # as a dict by those names, in the package's order.
    assert _verify_lines(py_out) == _verify_lines(cpp_out)
    assert "verify: output 'parts_1' vs expected 'parts_1' (within 4 ULP)" in cpp_out, cpp_out
    names = ["sum", "parts_0", "parts_1"]
    assert list(torch.load(tmp_path / "py.pt")) == list(torch.load(tmp_path / "cpp.pt")) == names
    py_outputs, cpp_outputs = load_tensors(tmp_path / "py.pt", names), load_tensors(tmp_path / "cpp.pt", names)
    assert len(py_outputs) == len(cpp_outputs) == 3
    assert all(_bits_equal(p, c) for p, c in zip(py_outputs, cpp_outputs))
    # sum and parts[0] are single roundings: eager's bits exactly.
    assert _bits_equal(cpp_outputs[0], x + y) and _bits_equal(cpp_outputs[1], x * 2.0)
    assert read_package_spec(pair.path).shared_dims == [[(0, 0), (1, 0)]]
    # Each size in range, but not the same: the compiled code would read out of bounds.
    bad = save_tensors(tmp_path / "bad.pt", [torch.randn(11, 5), torch.randn(12, 5)])
    message = "input[1] (y): dim 0 must equal input[0] (x) dim 0 (the package compiled them as one dynamic size), got 12 and 11."
    py = CliRunner().invoke(run_inference_app, [str(pair.path), "--inputs", str(bad)])
    cpp = run_cmd(build.runner, pair.path, "--inputs", bad)
    assert py.exit_code == 2 and message in py.output, py.output
    assert cpp.returncode == 2 and message in cpp.stderr, cpp.stderr


# --- CLI usage errors -------------------------------------------------------------------

@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "examples.user_models:scale_shift_model"], "pass --input-shape once per forward argument"),
        (["--input-shape", "1,3"], "apply to a model given with --model"),
        (["--model", "examples.user_models:scale_shift_model", "--dynamic", "batch"], "give dynamic dims with --dynamic-dim"),
        (["--model", "no_such_module_xyz:f", "--input-shape", "1"], "could not import it"),
        (["--model", "examples.user_models:missing", "--input-shape", "1"], "has no callable 'missing'"),
        (["--model", "examples.user_models", "--input-shape", "1"], "expected package.module:factory"),
        (["--model", "examples.user_models:ScaleShiftModel", "--model-arg", "features=x y",
          "--input-shape", "1"], "the factory raised"),
        (["--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
          "--dynamic-dim", "0.0=5:64"], "outside 5:64"),
        (["--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
          "--dynamic-dim", "2.0=1:64"], "there is no dim 0 of input 2"),
        (["--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
          "--dynamic-dim", "0.0"], "expected INPUT.DIM[,INPUT.DIM...]=MIN:MAX"),
        (["--model", "examples.user_models:scale_shift_model", "--input-shape", "4,x"],
         "expected comma-separated sizes"),
        (["--model", "examples.user_models:two_library_model", "--input-shape", "4,3,8,8"],
         "returns its own example inputs"),
        (["--model", "examples.user_models:pair_model", "--input-shape", "3,5", "--input-shape", "4,5",
          "--dynamic-dim", "0.0,1.0=1:32"], "these positions share one size, but the example inputs differ"),
        # torch's "Constraints violated ... draft_export()" told in this tool's terms
        (["--model", "examples.user_models:pair_model", "--input-shape", "4,8", "--input-shape", "4,8",
          "--dynamic-dim", "0.0=1:8"], "the model ties input 0 dim 0 to input 1 dim 0 (they must have one size), but "
         "--dynamic-dim 0.0=1:8 gives input 0 dim 0 a size of its own. Pass them together in one option: "
         "--dynamic-dim 0.0,1.0=1:8"),
        (["--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
          "--dynamic-dim", "0.1=1:32"], "the model's code fixes input 0 dim 1 to 16, so it cannot be dynamic"),
    ],
)
def test_export_compile_model_usage_errors(args, message, op_library, tmp_path):
    code, output = _export(args + ["--output", str(tmp_path / "m.pt2")])
    assert code == 2, output
    assert message in output, output
    assert "draft_export" not in output
    assert not (tmp_path / "m.pt2").exists()


# --- units --------------------------------------------------------------------------------

def test_parse_dynamic_dim():
    dim = parse_dynamic_dim("0.0,1.2=2:64")
    assert dim.positions == ((0, 0), (1, 2)) and (dim.min, dim.max) == (2, 64) and str(dim) == "0.0,1.2=2:64"
    unbounded = parse_dynamic_dim("0.0=2:")
    assert (unbounded.min, unbounded.max) == (2, None) and str(unbounded) == "0.0=2:"
    for bad in ("0=1:4", "0.0=4:4", "0.0=1", "a.b=1:2", "0.0=0:8", "0.0=0:", "0.0=:", "0.0=1:x"):
        with pytest.raises(InputError):
            parse_dynamic_dim(bad)


def test_parse_model_args():
    assert parse_model_args(["n=8", "scale=0.5", "name=abc", "flag=True", "dims=(1, 2)"]) == {
        "n": 8, "scale": 0.5, "name": "abc", "flag": True, "dims": (1, 2)}
    with pytest.raises(InputError):
        parse_model_args(["no_equals"])


def test_load_model_calls_the_factory_with_its_arguments():
    model, inputs = load_model("examples.user_models:scale_shift_model", {"features": 8})
    assert model.scale.shape == (8,) and inputs is None
    with pytest.raises(ModelError, match="returned a float"):
        load_model("random:random")


def test_flatten_outputs_keeps_pytree_order():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    assert flatten_outputs((a, [b, {"k": c}])) == [a, b, c]
    # A Python scalar becomes the 0-d tensor of its kind, as a package carries it.
    flat = flatten_outputs((a, 3, 0.5, True))
    assert [(t.dtype, t.item()) for t in flat[1:]] == [(torch.int64, 3), (torch.float64, 0.5), (torch.bool, True)]
    with pytest.raises(ModelError, match="leaf 1 is a str"):
        flatten_outputs((a, "three"))
    with pytest.raises(ModelError, match="leaf 1 is the int 36893488147419103232, which an int64 cannot hold"):
        flatten_outputs((a, 2**65))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_ulp_distance_counts_representable_values(dtype):
    x = torch.tensor([1.0, -2.5, 0.0, 3.0, float("nan"), float("nan"), 1e-3], dtype=dtype)
    y = x.clone()
    y[0] = torch.nextafter(torch.nextafter(x[0], x[0] + 1), x[0] + 1)  # 2 ULP up
    y[1] = torch.nextafter(x[1], x[1] - 1)  # 1 ULP away from zero
    y[2] = -0.0  # +0.0 vs -0.0: different bits, same value
    y[3] = float("nan")
    y[6] = -x[6]  # across zero: the distances to zero add up
    distance = ulp_distance(x, y)
    assert distance[:6].tolist() == [2.0, 1.0, 0.0, math.inf, 0.0, 0.0]
    to_zero = ulp_distance(x[6:], torch.zeros(1, dtype=dtype))
    assert to_zero[0] > 1000 and distance[6] == 2 * to_zero[0]
    report = compare_bits(x, y)
    assert report.max_ulp == math.inf and not compare(x, y, Tolerance(ULP, 10**9)).passed
    assert compare(x[:3], y[:3], Tolerance(ULP, 2)).passed and not compare(x[:3], y[:3], Tolerance(ULP, 1)).passed
    # Only the sign of zero differs: 0 ULP apart, yet bitwise means bit-identity.
    assert compare_bits(x[2:3], y[2:3]).max_ulp == 0 and not compare(x[2:3], y[2:3], Tolerance(BITWISE)).passed


@pytest.fixture(scope="session")
def keyword(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """A factory returning (module, args, kwargs): a dict input, a Python float and a
    keyword tensor, batch dynamic across all three tensors."""
    return _export_model_package(tmp_path_factory.mktemp("keyword"), [
        "--model", "examples.user_models:keyword_model", "--dynamic-dim", "0.0,1.0,2.0=1:8"])


def test_keyword_and_dict_inputs_run_in_both_runtimes(keyword: UserPackage, build: Build, tmp_path: Path) -> None:
    spec = read_package_spec(keyword.path)
    assert [t.name for t in spec.inputs] == ["features", "extras_bias", "mask"]
    assert [t.name for t in spec.outputs] == ["hidden", "total"]
    assert spec.constant_inputs == [{"name": "scale", "index": 2, "value": 0.5}]
    py, cpp = _run_both(build, keyword.path, [], keyword.reference / "inputs.pt", keyword.reference / "expected.pt",
                        tmp_path)
    assert py[0] == 0 and cpp[0] == 0, (py, cpp)
    # At another batch, from the model's own call: both runtimes give the same bits.
    from examples.user_models import keyword_model

    model, _, _ = keyword_model()
    inputs = save_tensors(tmp_path / "b7.pt", [torch.randn(7, 5, 6), torch.randn(7, 5, 6), torch.ones(7, 5)])
    for out in ("py7.pt", "cpp7.pt"):
        (tmp_path / out).unlink(missing_ok=True)
    py = CliRunner().invoke(run_inference_app, [str(keyword.path), "--inputs", str(inputs), "--outputs",
                                                str(tmp_path / "py7.pt")])
    cpp = run_cmd(build.runner, keyword.path, "--inputs", inputs, "--outputs", tmp_path / "cpp7.pt")
    assert py.exit_code == 0 and cpp.returncode == 0, (py.output, cpp.stdout + cpp.stderr)
    py7, cpp7 = torch.load(tmp_path / "py7.pt"), torch.load(tmp_path / "cpp7.pt")
    assert list(py7) == list(cpp7) == ["hidden", "total"]
    for name in py7:
        assert torch.equal(bit_view(py7[name]), bit_view(cpp7[name]))
    features, mask = torch.load(inputs)[0], torch.load(inputs)[2]
    with torch.no_grad():
        eager = model(features, {"bias": torch.load(inputs)[1]}, 0.5, mask=mask)
    torch.testing.assert_close(py7["hidden"], eager["hidden"])


def test_aoti_runner_names_a_dict_output_and_writes_it_by_name(keyword: UserPackage, build: Build,
                                                              tmp_path: Path) -> None:
    """KeywordModel returns {"hidden", "total"}: aoti_runner names each output by its key
    in every check, and writes --outputs (as the export wrote its references) as a dict
    by those names, in the model's order, with the bits the Python API returns for the
    same call. A list of the same outputs still serves as --expected, and compare pairs
    the dict with the list by position."""
    import aoti_deploy as ad
    from aoti_deploy.cli.main import app as cli_app
    from examples.user_models import keyword_model

    ref = keyword.reference
    assert list(torch.load(ref / "expected.pt")) == list(torch.load(ref / "eager.pt")) == ["hidden", "total"]
    ran = run_cmd(build.runner, keyword.path, "--inputs", ref / "inputs.pt", "--expected", ref / "expected.pt",
                  "--eager-reference", ref / "eager.pt", "--outputs", tmp_path / "cpp.pt")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    lines = _verify_lines(ran.stdout)
    assert lines[:3] == ["verify: output 'hidden' vs expected 'hidden' (bitwise): identical",
                         "verify: output 'total' vs expected 'total' (bitwise): identical",
                         "runtime parity: PASSED (bit-identical)"], lines
    assert [line.split(" (")[0] for line in lines[3:5]] == ["verify: output 'hidden' vs eager 'hidden'",
                                                            "verify: output 'total' vs eager 'total'"], lines
    assert "output[" not in ran.stdout, ran.stdout

    written = torch.load(tmp_path / "cpp.pt", weights_only=True)
    _, args, kwargs = keyword_model()  # the example call, whose tensors inputs.pt holds
    with ad.load(keyword.path) as package:
        returned = package(*args, **kwargs)
    expected = torch.load(ref / "expected.pt")
    assert type(written) is dict and list(written) == list(returned) == ["hidden", "total"]
    for name in written:
        assert _bits_equal(written[name], returned[name]) and _bits_equal(written[name], expected[name]), name

    save_tensors(tmp_path / "list.pt", list(written.values()))
    listed = run_cmd(build.runner, keyword.path, "--inputs", ref / "inputs.pt", "--expected", tmp_path / "list.pt")
    assert listed.returncode == 0 and "runtime parity: PASSED (bit-identical)" in listed.stdout, listed.stdout
    compared = CliRunner().invoke(cli_app, ["compare", str(tmp_path / "cpp.pt"), str(tmp_path / "list.pt")])
    assert compared.exit_code == 0 and "compared by position" in compared.output, compared.output
    assert "hidden (bitwise): identical" in compared.output, compared.output
