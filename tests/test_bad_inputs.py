"""Bad inputs, packages and libraries, each run through both runtimes (the Python
run_inference and the C++ aoti_runner): exit 2, a message that names the problem,
and no output file."""

from __future__ import annotations

import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch

from conftest import edit_spec, rewrite_metadata, run_both_runtimes, run_cmd, run_cpp_runtime, run_python_runtime
from aoti_deploy.package.host import instruction_set_flags


@dataclass(frozen=True)
class Ctx:
    static: Path  # float32 [2, 3, 8, 12]
    dynamic: Path  # float32 [1..8, 3, 1..64, 1..64]
    tmp: Path


def tensors(*items) -> Callable[[Ctx], Path]:
    def write(ctx: Ctx) -> Path:
        path = ctx.tmp / "inputs.pt"
        torch.save(list(items) if len(items) != 1 or not isinstance(items[0], dict) else items[0], path)
        return path
    return write


def raw_file(content: bytes, name: str = "inputs.pt") -> Callable[[Ctx], Path]:
    def write(ctx: Ctx) -> Path:
        path = ctx.tmp / name
        path.write_bytes(content)
        return path
    return write


def static(ctx: Ctx) -> Path:
    return ctx.static


def dynamic(ctx: Ctx) -> Path:
    return ctx.dynamic


def crafted(aoti: dict[str, str | None] | None = None, **fields: object) -> Callable[[Ctx], Path]:
    return lambda ctx: edit_spec(ctx.static, ctx.tmp / "crafted.pt2", aoti, **fields)


def truncated(ctx: Ctx) -> Path:
    data = ctx.static.read_bytes()
    return raw_file(data[: len(data) // 3], "truncated.pt2")(ctx)


def zip_not_package(ctx: Ctx) -> Path:
    path = ctx.tmp / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "not an AOTI package")
    return path


GOOD = torch.randn(2, 3, 8, 12)


@dataclass(frozen=True)
class Case:
    id: str
    message: str
    package: Callable[[Ctx], Path] = static
    inputs: Callable[[Ctx], Path] | None = tensors(GOOD)


CASES = [
    # inputs vs a static package
    Case("wrong-rank", "input[0] (x): expected rank 4 [2, 3, 8, 12], got rank 3", inputs=tensors(torch.randn(2, 3, 8))),
    Case("wrong-rank-5d", "expected rank 4", inputs=tensors(torch.randn(1, 2, 3, 8, 12))),
    Case("wrong-static-batch", "input[0] (x): dim 0 expected 2, got 1", inputs=tensors(torch.randn(1, 3, 8, 12))),
    Case("wrong-static-height", "input[0] (x): dim 2 expected 8, got 4", inputs=tensors(torch.randn(2, 3, 4, 12))),
    Case("wrong-static-channels", "input[0] (x): dim 1 expected 3, got 4", inputs=tensors(torch.randn(2, 4, 8, 12))),
    Case("wrong-dtype-float64", "input[0] (x): expected dtype float32, got float64",
         inputs=tensors(GOOD.double())),
    Case("wrong-dtype-bfloat16", "expected dtype float32, got bfloat16", inputs=tensors(GOOD.bfloat16())),
    Case("wrong-dtype-int32", "expected dtype float32, got int32", inputs=tensors(GOOD.int())),
    Case("two-inputs", "wrong number of inputs: the package expects 1, got 2", inputs=tensors(GOOD, GOOD)),
    Case("no-inputs", "the package expects 1, got 0", inputs=tensors()),
    # inputs vs a dynamic package
    Case("dynamic-batch-above", "input[0] (x): dim 0 expected a size in [1, 8], got 9", package=dynamic,
         inputs=tensors(torch.randn(9, 3, 8, 8))),
    Case("dynamic-height-zero", "input[0] (x): dim 2 expected a size in [1, 64], got 0", package=dynamic,
         inputs=tensors(torch.randn(1, 3, 0, 8))),
    Case("dynamic-width-above", "input[0] (x): dim 3 expected a size in [1, 64], got 65", package=dynamic,
         inputs=tensors(torch.randn(1, 3, 8, 65))),
    Case("dynamic-static-channels", "input[0] (x): dim 1 expected 3, got 2", package=dynamic,
         inputs=tensors(torch.randn(1, 2, 8, 8))),
    # tensor files
    Case("file-holds-dict-of-other-names", "missing input(s) x; unknown name(s) \"y\"", inputs=tensors({"y": GOOD})),
    Case("file-element-not-tensor", "element 1 is of type", inputs=tensors(GOOD, 3)),
    Case("file-empty", "tensor file is empty", inputs=raw_file(b"")),
    Case("file-garbage", "inputs.pt is not a tensor file: it is not a zip archive, the format torch.save writes",
         inputs=raw_file(b"\x00garbage, not a torch.save file")),
    Case("file-text", "inputs.pt is not a tensor file: it is not a zip archive, the format torch.save writes. A "
         "tensor file is a list of tensors saved with torch.save([tensor, ...], path)", inputs=raw_file(b"1.0 2.0\n")),
    Case("file-missing", "tensor file not found", inputs=lambda ctx: ctx.tmp / "absent.pt"),
    # packages
    Case("package-missing", "package not found", package=lambda ctx: ctx.tmp / "absent.pt2"),
    Case("package-empty", "package is empty", package=raw_file(b"", "empty.pt2")),
    Case("package-not-zip", "not a zip archive", package=raw_file(b"ELF? no, text", "text.pt2")),
    Case("package-truncated", "could not read the AOTI package", package=truncated),
    Case("package-zip-not-aoti", "could not read the AOTI package", package=zip_not_package),
    Case("package-without-toolkit-metadata", "has no aoti_deploy spec",
         package=lambda ctx: rewrite_metadata(ctx.static, ctx.tmp / "crafted.pt2", {"aoti_deploy.spec": None})),
    Case("package-for-cuda", "the package was compiled for cuda",
         package=crafted({"AOTI_DEVICE_KEY": "cuda"}, device="cuda")),
    Case("package-cpu-flag-missing", "on a CPU with avx1024, which this host lacks",
         package=crafted(cpu_flags=instruction_set_flags() + ["avx1024"])),
    Case("package-other-torch", "the package was compiled with torch 1.0.0",
         package=crafted(torch_version="1.0.0")),
    Case("package-unknown-device", "which this runner does not support (cpu or cuda)",
         package=crafted(device="tpu")),
    Case("package-malformed-spec", "package metadata is malformed: inputs[0]",
         package=crafted(inputs=[{"dtype": "float32"}])),
    Case("package-empty-range", "package metadata is malformed: inputs[0].dims[2]: the range 8..4 is empty",
         package=crafted(inputs=[{"dtype": "float32", "dims": [{"min": 2, "max": 2}, {"min": 3, "max": 3},
                                                                {"min": 8, "max": 4}, {"min": 12, "max": 12}]}],
                         example_shapes=None)),
    Case("package-newer-schema", "the package spec has schema version 99",
         package=crafted(schema_version=99)),
    Case("package-other-machine", "the package was compiled for riscv64",
         package=crafted({"AOTI_MACHINE": "riscv64"})),
]


@pytest.fixture
def ctx(compiled_package, dynamic_package, tmp_path) -> Ctx:
    return Ctx(compiled_package.path, dynamic_package, tmp_path)


@pytest.mark.parametrize("runtime", ["python", "cpp"])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_case_exits_2_names_the_problem_and_writes_nothing(ctx, build, op_library, case, runtime):
    package = case.package(ctx)
    inputs = case.inputs(ctx) if case.inputs else None
    outputs = ctx.tmp / "out.pt"
    if runtime == "python":
        code, output = run_python_runtime(package, op_library, inputs, outputs)
    else:
        code, output = run_cpp_runtime(build.runner, package, op_library, inputs, outputs)
    assert code == 2, output
    assert case.message in output
    assert not outputs.exists()


def test_good_case_passes_in_both_runtimes(ctx, build, op_library):
    # The control for the table above: the same harness with a good input succeeds.
    run_both_runtimes(build, op_library, ctx.static, GOOD, ctx.tmp)


def test_lazily_negated_input_is_resolved_in_both_runtimes(ctx, build, op_library):
    # A _neg_view keeps its neg bit through torch.save; AOTI must see -x, not x.
    x = torch.randn(2, 3, 8, 12)
    py_out, cpp_out = run_both_runtimes(build, op_library, ctx.static, x._neg_view(), ctx.tmp)
    expected = (-x).view(torch.int32)
    assert torch.equal(py_out.view(torch.int32), expected)
    assert torch.equal(cpp_out.view(torch.int32), expected)


def test_dynamic_package_runs_any_shape_in_range_in_both_runtimes(ctx, build, op_library):
    for shape in [(1, 3, 1, 1), (8, 3, 64, 64), (5, 3, 17, 3)]:
        x = torch.randn(shape)
        py_out, cpp_out = run_both_runtimes(build, op_library, ctx.dynamic, x, ctx.tmp)
        assert torch.equal(py_out.view(torch.int32), cpp_out.view(torch.int32))
        assert torch.equal(cpp_out.view(torch.int32), x.view(torch.int32))


@pytest.mark.parametrize("lib", ["missing", "other-so", "not-elf"])
def test_bad_op_library_in_both_runtimes(ctx, build, lib):
    """The same message from both runners, with the dynamic loader's own reason."""
    paths = {
        "missing": ctx.tmp / "libmissing.so",
        "other-so": Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so",
        "not-elf": raw_file(b"not an ELF", "libfake.so")(ctx),
    }
    path = paths[lib]
    message = {
        "missing": f"op library not found: {path}. Build it",
        "other-so": "no loaded library registers what the package needs: op my_ops::identity_conv_op and class "
                    "my_ops::IdentityConvClass, defined in libidentity_conv_ops.so. Pass each library's path",
        # Refused before dlopen, which crashes on a truncated library.
        "not-elf": f"op library {path} is not a complete shared library for this machine: it is 10 bytes long, "
                   "shorter than an ELF header. Rebuild it",
    }[lib]
    outputs = ctx.tmp / "out.pt"
    # A fresh process for Python: this one has the real library loaded already.
    run_inference = Path(sys.executable).parent / "run_inference"
    py = run_cmd(run_inference, ctx.static, path, "--outputs", outputs)
    assert py.returncode == 2 and message in py.stderr, py.stdout + py.stderr
    code, output = run_cpp_runtime(build.runner, ctx.static, path, None, outputs)
    assert code == 2 and message in output, output
    py_line = py.stderr.strip().removeprefix("error: ")
    cpp_line = next(line for line in output.splitlines() if line.startswith("aoti_runner: error: "))
    assert cpp_line.removeprefix("aoti_runner: error: ") == py_line
    assert not outputs.exists()


def test_sparse_input_is_rejected_by_the_python_runtime(compiled_package):
    from aoti_deploy.errors import InputError
    from aoti_deploy.package.archive import read_package_spec
    from aoti_deploy.runtime.validation import validate_inputs

    spec = read_package_spec(compiled_package.path)
    with pytest.raises(InputError, match="input\\[0\\] \\(x\\): expected a dense .strided. tensor, got layout sparse_coo"):
        validate_inputs([torch.randn(2, 3, 8, 12).to_sparse()], spec)


def test_meta_device_input_is_rejected_by_the_python_runtime(compiled_package):
    from aoti_deploy.errors import InputError
    from aoti_deploy.package.archive import read_package_spec
    from aoti_deploy.runtime.validation import validate_inputs

    spec = read_package_spec(compiled_package.path)
    with pytest.raises(InputError, match="input\\[0\\] \\(x\\): expected a tensor on cpu, got one on meta"):
        validate_inputs([torch.empty(2, 3, 8, 12, device="meta")], spec)
