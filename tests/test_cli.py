"""The CLIs through typer's CliRunner: the happy paths, and wrong option values
that give clear errors and exit 2; and the one CLI, aoti-deploy, beside the two named
entry points (export_compile, run_inference), as processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.cli.run_inference import app as run_inference_app
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors
from aoti_deploy.verify.bits import compare_bits
from aoti_deploy.verify.tolerance import ULP, Tolerance

runner = CliRunner()


def test_export_compile_happy_path(compiled_package):
    output = compiled_package.cli_output
    assert compiled_package.cli_exit_code == 0, output
    assert compiled_package.path.is_file()
    # The graph is shown and holds both custom layers.
    assert "call_torchbind" in output and "my_ops.identity_conv_op" in output
    # The summary table: stage timings, package path and size, the bitwise verdict.
    for stage in ("load op libraries", "build model", "export", "compile", "verify"):
        assert f"stage: {stage}" in output
    assert "package size" in output and "MB" in output
    assert "eager vs package [2, 3, 8, 12]" in output and "identical" in output
    assert "verify eager vs package: PASSED (bit-identical)" in output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dtype", "int4"], "Invalid value for '--dtype'"),
        (["--dtype", "int8"], "--dtype int8 applies to the inputs of a model given with --model"),
        (["--channels", "0"], "Invalid value for '--channels'"),
        (["--device", "tpu"], "Invalid value for '--device'"),
        pytest.param(["--device", "cuda"], "--device cuda was requested, but torch.cuda.is_available() is false",
                     marks=pytest.mark.skipif(torch.cuda.is_available(),
                                              reason="checks the message on a machine without CUDA")),
        (["--batch", "two"], "Invalid value for '--batch'"),
        (["--dynamic", "channels"], "cannot make 'channels' dynamic; choose from batch, height, width"),
        (["--dynamic", "batch", "--batch-range", "8"], "expected MIN:MAX with two integers"),
        (["--dynamic", "batch", "--batch-range", "4:4"], "--batch-range 4:4 holds fewer than two sizes"),
        (["--dynamic", "height", "--height", "300", "--height-range", "1:256"],
         "--height 300 is outside --height-range 1:256"),
    ],
)
def test_export_compile_rejects_wrong_option_values(args, message, tmp_path):
    result = runner.invoke(export_compile_app, args + ["--output", str(tmp_path / "m.pt2")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "m.pt2").exists()


def test_export_compile_missing_op_library_is_a_clear_error(tmp_path):
    result = runner.invoke(export_compile_app, ["--op-lib", str(tmp_path / "none.so"),
                                                "--output", str(tmp_path / "m.pt2")])
    assert result.exit_code == 2
    assert f"op library not found: {tmp_path / 'none.so'}" in result.output
    # The progress bar cleared itself: no spinner line ("load op libraries ... 0/5") above the error.
    assert result.output.startswith("error: op library not found"), result.output


def test_run_inference_happy_path(compiled_package, op_library, tmp_path):
    out = tmp_path / "out.pt"
    result = runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library),
                                               "--inputs", str(compiled_package.input_file),
                                               "--outputs", str(out)])
    assert result.exit_code == 0, result.output
    assert "verify: output[0] vs input[0] (bitwise): identical" in result.output
    assert result.output.strip().endswith("PASSED")
    (y,) = load_tensors(out)
    assert torch.equal(y.view(torch.int32), compiled_package.inputs[0].view(torch.int32))


def test_run_inference_random_input_uses_the_package_shape(compiled_package, op_library):
    result = runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library), "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert "input: random (seed 5)" in result.output and "PASSED" in result.output


def test_run_inference_mismatch_exits_1(compiled_package, op_library, tmp_path):
    x = torch.randn(2, 3, 8, 12)
    x[1, 2, 7, 11] = -0.0
    inputs = save_tensors(tmp_path / "in.pt", [x])
    result = runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library), "--inputs", str(inputs)])
    assert result.exit_code == 1
    assert "first at [1, 2, 7, 11]: got 0 (0x00000000), expected -0 (0x80000000)" in result.output
    assert "FAILED" in result.output


@pytest.mark.parametrize(
    "content, message",
    [
        (lambda: [torch.randn(2, 3, 8, 13)], "input[0] (x): dim 3 expected 12, got 13"),
        (lambda: [torch.randn(2, 3, 8, 12).double()], "expected dtype float32, got float64"),
        (lambda: [torch.randn(2, 3, 8, 12), "x"], "element 1 is of type str, expected a tensor"),
    ],
)
def test_run_inference_bad_inputs_exit_2_and_write_nothing(compiled_package, op_library, tmp_path, content, message):
    inputs = tmp_path / "in.pt"
    torch.save(content(), inputs)
    result = runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library), "--inputs", str(inputs),
                                               "--outputs", str(tmp_path / "out.pt")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out.pt").exists()


def test_run_inference_unwritable_outputs_exit_2(compiled_package, op_library, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library),
                                               "--outputs", str(blocker / "out.pt")])
    assert result.exit_code == 2
    assert f"could not write tensors to {blocker / 'out.pt'}" in result.output


def test_run_inference_missing_package(tmp_path):
    result = runner.invoke(run_inference_app, [str(tmp_path / "absent.pt2")])
    assert result.exit_code == 2
    assert "package not found" in result.output


def test_compare_tensors(tmp_path):
    a = save_tensors(tmp_path / "a.pt", [torch.tensor([0.0, 1.0])])
    b = save_tensors(tmp_path / "b.pt", [torch.tensor([-0.0, 1.0])])
    same = runner.invoke(cli_app, ["compare", str(a), str(a)])
    assert same.exit_code == 0 and "identical" in same.output
    differ = runner.invoke(cli_app, ["compare", str(a), str(b)])
    assert differ.exit_code == 1 and "1 of 2 elements differ" in differ.output


def test_compare_tensors_compares_both_parts_of_complex_numbers(tmp_path):
    """complex128 has no 16-byte integer twin: it is compared as its real and
    imaginary parts, so a difference in the imaginary part alone is found."""
    a = torch.zeros(2, dtype=torch.complex128)
    b = a.clone()
    b[1] = 1j
    same = runner.invoke(cli_app, ["compare", str(save_tensors(tmp_path / "a.pt", [a])), str(tmp_path / "a.pt")])
    assert same.exit_code == 0 and "compare: PASSED (bit-identical)" in same.output, same.output
    differ = runner.invoke(cli_app, ["compare", str(tmp_path / "a.pt"), str(save_tensors(tmp_path / "b.pt", [b]))])
    assert differ.exit_code == 1, differ.output
    assert "1 of 4 elements differ; first at [1, 1]: got 0 (0x0000000000000000), expected 1" in differ.output


def test_inspect_package_table_and_json_match_the_cpp_runner(build, dynamic_package):
    import json

    from conftest import run_cmd

    table = runner.invoke(cli_app, ["inspect", str(dynamic_package)])
    assert table.exit_code == 0, table.output
    as_json = runner.invoke(cli_app, ["inspect", str(dynamic_package), "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.output)
    from aoti_deploy.package.archive import read_package_spec

    spec = read_package_spec(dynamic_package)
    # The model's input name, when the package records one: "name" is written only then.
    named = {"name": spec.inputs[0].name} if spec.inputs[0].name else {}
    assert data["inputs"] == [{"dtype": "float32", "dims": [{"min": 1, "max": 8}, {"min": 3, "max": 3},
                                                              {"min": 1, "max": 64}, {"min": 1, "max": 64}],
                               **named}]
    # The IdentityModel's forward argument, and a lone output.
    assert (spec.inputs[0].name, spec.outputs[0].name) == ("x", "output")
    assert data["required_ops"] == [{"name": "my_ops::identity_conv_op", "overload": "default"}]
    assert data["required_classes"] == ["my_ops::IdentityConvClass"]
    assert data["aoti"]["AOTI_CPU_ISA"]
    assert data["torch_version"] == torch.__version__

    cpp = run_cmd(build.runner, dynamic_package, "--inspect")
    assert cpp.returncode == 0, cpp.stderr
    lines = cpp.stdout.splitlines()
    assert lines[0] == f"package: {dynamic_package}"
    cpp_rows = [tuple(line.split(": ", 1)) if ": " in line else (line.rstrip(":"), "") for line in lines[1:]]
    # The same rows, names and order in both runtimes; a recorded name before the shape.
    assert cpp_rows == spec.describe()
    input_name, output_name = (f"{t[0].name}  " if t[0].name else "" for t in (spec.inputs, spec.outputs))
    assert dict(cpp_rows)["input[0]"] == f"{input_name}[1..8, 3, 1..64, 1..64] float32"
    # An identity, right after the inputs.
    assert cpp_rows[1] == ("output[0]", f"{output_name}[1..8, 3, 1..64, 1..64] float32")
    without_names = [[{k: v for k, v in item.items() if k != "name"} for item in data[key]]
                     for key in ("outputs", "inputs")]
    assert without_names[0] == without_names[1]  # an identity: the same specs, under their own names
    assert dict(cpp_rows)["cpu isa"] == data["aoti"]["AOTI_CPU_ISA"]
    for name, value in cpp_rows:
        assert name in table.output and value in table.output


def test_inspect_package_bad_file_exits_2(tmp_path):

    result = runner.invoke(cli_app, ["inspect", str(tmp_path / "absent.pt2")])
    assert result.exit_code == 2
    assert "package not found" in result.output


def test_export_compile_passes_every_option_to_the_api(monkeypatch, tmp_path):
    """The CLI's wiring, without a compile: every option reaches the model source and
    the ExportOptions the API's export takes."""
    import aoti_deploy.cli.export_compile as cli_module
    from aoti_deploy.errors import AotiDeployError

    seen = {}

    def capture(source, options=None, package_path=None, on_stage=None):
        seen.update(source=source, options=options, path=package_path)
        raise AotiDeployError("stopped by the test")

    monkeypatch.setattr(cli_module, "export", capture)
    identity_args = ["--channels", "5", "--batch", "2", "--height", "7", "--width", "9", "--dtype", "float64",
                     "--seed", "4", "--variant", "out", "--dynamic", "batch,width", "--batch-range", "1:8",
                     "--width-range", "3:30", "--output", str(tmp_path / "m.pt2"), "--max-ulp", "3"]
    result = runner.invoke(export_compile_app, identity_args)
    assert result.exit_code == 2 and "stopped by the test" in result.output
    source, options = seen["source"], seen["options"]
    assert type(source).__name__ == "IdentitySource"
    assert source.shape() == (2, 5, 7, 9) and source.dtype == "float64" and source.seed == 4 and options.seed == 4
    assert source.variant == "out" and source.dynamic == ("batch", "width")
    assert options.tolerance == Tolerance(ULP, max_ulp=3)
    assert source.ranges["batch"] == (1, 8) and source.ranges["width"] == (3, 30)
    assert seen["path"] == tmp_path / "m.pt2"

    model_args = ["--model", "pkg.mod:make", "--model-arg", "n=3", "--input-shape", "2,4", "--input-shape", "4",
                  "--dynamic-dim", "0.0=1:9", "--op-lib", "a.so", "--op-lib", "b.so", "--fake-module", "pkg.fakes",
                  "--save-reference", str(tmp_path / "ref"), "--allow-python-ops"]
    result = runner.invoke(export_compile_app, model_args)
    assert result.exit_code == 2 and "stopped by the test" in result.output
    source, options = seen["source"], seen["options"]
    assert source.target == "pkg.mod:make" and source.model_args == {"n": 3}
    assert source.input_shapes == [(2, 4), (4,)] and [str(d) for d in source.dynamic_dims] == ["0.0=1:9"]
    assert options.op_libraries == [Path("a.so"), Path("b.so")] and options.fake_modules == ["pkg.fakes"]
    assert options.references == tmp_path / "ref" and options.allow_python_ops


def test_compare_tensors_passes_two_empty_lists(tmp_path):
    """The same verdict rule as both runners: nothing differs, so PASSED (exit 0)."""
    empty = save_tensors(tmp_path / "empty.pt", [])
    result = CliRunner().invoke(cli_app, ["compare", str(empty), str(empty)])
    assert result.exit_code == 0 and "PASSED" in result.output, result.output


def test_export_compile_and_run_inference_find_the_build_from_another_folder(compiled_package, build, tmp_path):
    """No build/ in the current folder, no --op-lib: the checkout's library. The export
    is a cache hit on a copy of the session's package (same model, options and library
    content), so nothing compiles."""
    import shutil

    from conftest import run_cli

    package = tmp_path / "model.pt2"
    shutil.copy(compiled_package.path, package)
    batch, channels, height, width = (str(n) for n in compiled_package.inputs[0].shape)
    export = run_cli("export_compile", "--batch", batch, "--channels", channels, "--height", height, "--width", width,
                     "--output", package, "--no-show-graph", cwd=tmp_path, build=build)
    assert export.returncode == 0, export.stdout + export.stderr
    assert "cached" in export.stdout and str(build.op_library.resolve()) in export.stdout, export.stdout
    run = run_cli("run_inference", package, "--inputs", compiled_package.input_file, cwd=tmp_path, build=build)
    assert run.returncode == 0 and run.stdout.strip().endswith("PASSED"), run.stdout + run.stderr
    assert f"loaded op library {build.op_library.resolve()}" in run.stdout


def test_a_library_variable_naming_no_file_is_an_error_not_a_fallback(compiled_package, build, tmp_path):
    from conftest import run_cli

    missing = tmp_path / "nonexistent" / "lib.so"
    run = run_cli("run_inference", compiled_package.path, cwd=tmp_path, build=build, AOTI_DEPLOY_OPS_LIB=str(missing))
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"AOTI_DEPLOY_OPS_LIB is set to {missing}, which does not exist" in run.stderr
    assert "PASSED" not in run.stdout


def test_export_compile_loads_only_the_libraries_given(build, tmp_path):
    """--op-lib with the wrong library for the IdentityModel: nothing else is loaded
    behind the user's back, and the error says which op and class need which library.
    A fresh process: this one has the op library loaded already."""
    from conftest import run_cli

    result = run_cli("export_compile", "--height", "8", "--width", "8", "--op-lib", build.extra_op_library,
                     "--output", tmp_path / "m.pt2", cwd=tmp_path, build=build)
    assert result.returncode == 2, result.stdout + result.stderr
    assert ("the IdentityModel needs class my_ops::IdentityConvClass and op my_ops::identity_conv_op, defined in "
            "libidentity_conv_ops.so, which the libraries given with --op-lib (libextra_ops.so) do not register"
            ) in result.stderr
    assert not (tmp_path / "m.pt2").exists()


@pytest.mark.parametrize(
    "content, why",
    [
        ("text", "it is not a zip archive, the format torch.save writes"),
        ("numpy", "it holds objects other than tensors (Unsupported global: GLOBAL numpy"),
    ],
)
def test_a_file_that_is_not_a_tensor_file_says_what_the_format_is(compiled_package, op_library, tmp_path, content, why):
    """Never torch's advice to retry with weights_only=False, which would run code
    from the file."""
    import numpy

    path = tmp_path / "data.txt"
    if content == "text":
        path.write_text("1.0 2.0 3.0\n")
    else:
        torch.save([numpy.ones(3)], path)
    expected = (f"{path} is not a tensor file: {why}", "A tensor file is a list of tensors saved with "
                "torch.save([tensor, ...], path), or a runner's --outputs.")
    for result in (runner.invoke(cli_app, ["compare", str(path), str(path)]),
                   runner.invoke(run_inference_app, [str(compiled_package.path), str(op_library), "--inputs", str(path)])):
        assert result.exit_code == 2, result.output
        assert all(part in result.output for part in expected), result.output
        assert "weights_only" not in result.output


@pytest.mark.parametrize("command", [["export_compile"], ["aoti-deploy", "export"], ["aoti-deploy", "matrix"]])
def test_help_shows_square_brackets_rich_would_take_for_markup(command):
    app = export_compile_app if command == ["export_compile"] else cli_app
    result = runner.invoke(app, [*command[1:], "--help"], env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})
    assert result.exit_code == 0, result.output
    assert "pip install -e '.[onnx]'" in result.output, result.output
    if command[-1] != "matrix":
        assert "[default: artifacts/model.pt2, or artifacts/model.onnx]" in result.output, result.output


def test_input_shape_draws_the_same_random_inputs_in_both_runtimes(dynamic_package, build, op_library, tmp_path):
    """--input-shape on a dynamic package: both runtimes draw the same tensor, the one
    torch's CPU generator gives for the seed (drawn here with plain torch), and print
    the same input[i] line."""
    from conftest import run_cmd

    shape, seed = (5, 3, 33, 7), 3
    args = ["--input-shape", ",".join(map(str, shape)), "--seed", str(seed)]
    py = runner.invoke(run_inference_app, [str(dynamic_package), str(op_library), *args,
                                           "--outputs", str(tmp_path / "py.pt")])
    cpp = run_cmd(build.runner, dynamic_package, op_library, *args, "--outputs", tmp_path / "cpp.pt")
    assert py.exit_code == 0 and cpp.returncode == 0, py.output + cpp.stdout + cpp.stderr
    from aoti_deploy.package.archive import read_package_spec
    from aoti_deploy.package.spec import tensor_label

    line = f"{tensor_label('input', 0, read_package_spec(dynamic_package).inputs)}: [5, 3, 33, 7] float32 on cpu"
    assert line in py.output.splitlines() and line in cpp.stdout.splitlines()
    input_lines = [[l for l in out.splitlines() if l.startswith("input")] for out in (py.output, cpp.stdout)]
    assert input_lines[0] == input_lines[1] == [f"input: random (seed {seed})", line]
    drawn = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    for name in ("py.pt", "cpp.pt"):
        (output,) = load_tensors(tmp_path / name)
        assert torch.equal(output.view(torch.int32), drawn.view(torch.int32)), name


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input-shape", "9,3,8,8"], "--input-shape: input[0] (x): dim 0 expected a size in [1, 8], got 9"),
        (["--input-shape", "2,3,8,8", "--input-shape", "4"],
         "--input-shape: wrong number of inputs: the package expects 1, got 2. Give one --input-shape per input"),
        (["--input-shape", "2,3,x,8"], "--input-shape '2,3,x,8': expected comma-separated sizes"),
        (["--input-shape", "2,3,8,8", "--inputs", "in.pt"], "--input-shape sets the shape of the random inputs, "
                                                            "which --inputs replaces; pass one or the other."),
    ],
)
def test_bad_input_shape_is_refused_alike_by_both_runtimes(dynamic_package, build, op_library, tmp_path, args, message):
    from conftest import run_cmd

    args = [str(tmp_path / a) if a == "in.pt" else a for a in args]
    save_tensors(tmp_path / "in.pt", [torch.randn(2, 3, 8, 8)])
    py = runner.invoke(run_inference_app, [str(dynamic_package), str(op_library), *args,
                                           "--outputs", str(tmp_path / "py.pt")])
    cpp = run_cmd(build.runner, dynamic_package, op_library, *args, "--outputs", tmp_path / "cpp.pt")
    assert py.exit_code == 2 and message in py.output, py.output
    assert cpp.returncode == 2 and message in cpp.stderr, cpp.stdout + cpp.stderr
    assert not (tmp_path / "py.pt").exists() and not (tmp_path / "cpp.pt").exists()


# --- one CLI: aoti-deploy, and the two named entry points ---------------------------------

SUBCOMMANDS = ("export", "run", "inspect", "compare", "matrix", "bundle", "triton-repository", "serve", "fleet",
               "bench", "train")


def test_aoti_deploy_help_lists_every_subcommand_and_completion(build, tmp_path):
    from conftest import run_cli

    result = run_cli("aoti-deploy", "--help", cwd=tmp_path, build=build, COLUMNS="200")
    assert result.returncode == 0, result.stdout + result.stderr
    listed = [line.split()[1] for line in result.stdout.splitlines()
              if line.startswith("│ ") and len(line.split()) > 2 and not line.split()[1].startswith("-")]
    assert listed == list(SUBCOMMANDS), result.stdout
    assert "--install-completion" in result.stdout and "--show-completion" in result.stdout
    for name in SUBCOMMANDS:
        sub = runner.invoke(cli_app, [name, "--help"], env={"COLUMNS": "200"})
        assert sub.exit_code == 0 and f"Usage: aoti-deploy {name} [OPTIONS]" in sub.output, sub.output


def test_the_named_entry_points_stay_and_the_other_scripts_are_gone(build, tmp_path):
    from conftest import run_cli

    for script, option in (("export_compile", "--input-shape"), ("run_inference", "--trusted-key")):
        result = run_cli(script, "--help", cwd=tmp_path, build=build, COLUMNS="200")
        assert result.returncode == 0 and f"Usage: {script} [OPTIONS]" in result.stdout, result.stdout + result.stderr
        assert option in result.stdout
    scripts = Path(sys.executable).parent
    gone = ("compare_tensors", "inspect_package", "verify_matrix", "train_identity", "benchmark", "bundle",
            "triton_repository", "serve_triton")
    assert [name for name in gone if (scripts / name).exists()] == []


def test_aoti_deploy_run_is_run_inference_as_a_subprocess(compiled_package, build, tmp_path):
    """The same command under both names, as processes (run ends without teardown under
    both): the same report and exit code, for a pass and for a usage error."""
    from conftest import run_cli

    args = [compiled_package.path, "--inputs", compiled_package.input_file]
    one = run_cli("aoti-deploy", "run", *args, "--outputs", tmp_path / "one.pt", cwd=tmp_path, build=build)
    named = run_cli("run_inference", *args, "--outputs", tmp_path / "named.pt", cwd=tmp_path, build=build)
    assert one.returncode == named.returncode == 0, one.stdout + one.stderr
    assert one.stdout.strip().endswith("PASSED")
    assert [line for line in one.stdout.splitlines() if "one.pt" not in line] == [
        line for line in named.stdout.splitlines() if "named.pt" not in line]
    assert compare_bits(load_tensors(tmp_path / "one.pt")[0], load_tensors(tmp_path / "named.pt")[0]).identical
    missing = run_cli("aoti-deploy", "run", tmp_path / "absent.pt2", cwd=tmp_path, build=build)
    assert missing.returncode == 2 and "package not found" in missing.stderr, missing.stdout + missing.stderr
    unknown = run_cli("aoti-deploy", "no-such-command", cwd=tmp_path, build=build)
    assert unknown.returncode == 2 and "No such command 'no-such-command'" in unknown.stderr, unknown.stderr


def test_flags_show_no_value_in_help() -> None:
    """A flag takes no value: its help shows none (typer 0.29 printed `--bitwise <bool>`,
    and `--bitwise true` then fails)."""
    names = ["export", "run", "inspect", "compare", "matrix", "bundle", "triton-repository", "serve", "fleet",
             "bench", "train"]
    runner = CliRunner()
    for name in names:
        result = runner.invoke(cli_app, [name, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, (name, result.output)
        assert "<bool>" not in result.output, (name, result.output)
    flags = runner.invoke(cli_app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--bitwise " in flags and "<int" in runner.invoke(cli_app, ["serve", "--help"],
                                                            env={"COLUMNS": "200"}).output


def test_compare_pairs_dicts_by_name_and_lists_by_position(tmp_path: Path) -> None:
    """What torch.save(pkg(...)) or a runner's --outputs writes for a dict output:
    compared by key, whatever the order, and the report says so; other names are
    refused. A dict against a list (a runner's outputs by name against an older list
    of them) pairs by position, the dict in its order, and says so."""
    runner = CliRunner()
    a, b = torch.randn(2, 3), torch.arange(4)
    torch.save({"scores": a, "ids": b}, tmp_path / "one.pt")
    torch.save({"ids": b.clone(), "scores": a.clone()}, tmp_path / "two.pt")
    torch.save({"scores": a, "other": b}, tmp_path / "renamed.pt")
    same = runner.invoke(cli_app, ["compare", str(tmp_path / "one.pt"), str(tmp_path / "two.pt")])
    assert same.exit_code == 0, same.output
    assert "compared by name: 2 tensor(s)" in same.output and "scores (bitwise): identical" in same.output
    changed = a.clone()
    changed[0, 0] = -changed[0, 0]
    torch.save({"ids": b, "scores": changed}, tmp_path / "changed.pt")
    differ = runner.invoke(cli_app, ["compare", str(tmp_path / "one.pt"), str(tmp_path / "changed.pt")])
    assert differ.exit_code == 1 and "scores (bitwise)" in differ.output, differ.output
    renamed = runner.invoke(cli_app, ["compare", str(tmp_path / "one.pt"), str(tmp_path / "renamed.pt")])
    assert renamed.exit_code == 1 and "only in" in renamed.output and "'ids'" in renamed.output, renamed.output
    save_tensors(tmp_path / "list.pt", [a, b])
    mixed = runner.invoke(cli_app, ["compare", str(tmp_path / "one.pt"), str(tmp_path / "list.pt")])
    assert mixed.exit_code == 0, mixed.output
    said = f"compared by position ({tmp_path / 'one.pt'} by name, in its order; {tmp_path / 'list.pt'} a list): 2 tensor(s)"
    assert said in " ".join(mixed.output.split()), mixed.output  # rich wraps the long line
    assert "scores (bitwise): identical" in mixed.output and "ids (bitwise): identical" in mixed.output
    swapped = runner.invoke(cli_app, ["compare", str(tmp_path / "list.pt"), str(tmp_path / "two.pt")])
    assert swapped.exit_code == 1 and "ids (bitwise)" in swapped.output, swapped.output  # two.pt is in another order
    short = save_tensors(tmp_path / "short.pt", [a])
    counted = runner.invoke(cli_app, ["compare", str(tmp_path / "one.pt"), str(short)])
    assert counted.exit_code == 1 and "different numbers of tensors" in counted.output, counted.output
    lists = runner.invoke(cli_app, ["compare", str(tmp_path / "list.pt"), str(tmp_path / "list.pt")])
    assert lists.exit_code == 0 and "compared by position: 2 tensor(s)" in lists.output, lists.output
