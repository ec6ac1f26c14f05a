"""The Python API (aoti_deploy.export / load / Package) on models of a user's own:
keyword inputs, dict and nested inputs, Python scalars, dict outputs and
torch.export's Dim dynamic shapes, round-tripped through export, load, the call,
verify against eager and against the C++ runner (a process); and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import aoti_deploy as ad
from aoti_deploy.compiler.structure import output_names
from aoti_deploy.runtime.treespec import load_treespec
from aoti_deploy.verify.bits import bit_view
from conftest import REPO_ROOT, Build, QuickstartRun

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from examples.api_quickstart import Scorer, example_call  # noqa: E402
from examples.python_op_model import PythonOpModel  # noqa: E402


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bit_view(a), bit_view(b))


class Mixed(nn.Module):
    """Every input kind torch.export takes: a tensor, a dict holding a list, a
    Python int, bool and int list (baked in), and a keyword tensor; a nested output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)

    def forward(self, x, inputs, n: int, flag: bool, sizes: list[int], *, mask):
        y = self.lin(x * n + inputs["a"] - inputs["b"][0]) + sum(sizes)
        if flag:
            y = y + 1
        return {"out": y * mask, "pair": (y, y.sum(dim=1))}


def mixed_call(batch: int, seed: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(seed)
    args = (torch.randn(batch, 3, generator=g),
            {"a": torch.randn(batch, 3, generator=g), "b": [torch.randn(batch, 3, generator=g)]}, 3, True, [2, 3])
    return args, {"mask": torch.randn(batch, 4, generator=g)}


@dataclass
class Exported:
    model: nn.Module
    package: ad.Package
    stages: list[str]


@pytest.fixture(scope="session")
def mixed(tmp_path_factory: pytest.TempPathFactory, build: Build) -> Exported:
    torch.manual_seed(0)
    model = Mixed().eval()
    args, kwargs = mixed_call(2, 0)
    batch = ad.Dim("batch", min=1, max=8)
    stages: list[str] = []
    package = ad.export(
        model, args, kwargs,
        dynamic_shapes={"x": {0: batch}, "inputs": {"a": {0: batch}, "b": [{0: batch}]}, "n": None, "flag": None,
                        "sizes": [None, None], "mask": {0: batch}},
        package_path=tmp_path_factory.mktemp("api") / "mixed.pt2", on_stage=stages.append,
    )
    return Exported(model, package, stages)


def test_export_verifies_against_eager_at_two_shapes(mixed: Exported) -> None:
    report = mixed.package.report
    assert report is not None and report.passed, str(report)
    assert report.against == "eager"
    # The example at batch 2 and a second shape (the batch at its minimum, 1), 3 outputs each.
    labels = [check.name for check in report.outputs]
    assert len(labels) == 6 and any("[1, 3]" in label for label in labels), labels
    # Each output by the model's name, as the runners print it.
    assert [label.split("] ")[-1] for label in labels[:3]] == ["output 'out'", "output 'pair_0'", "output 'pair_1'"]
    assert mixed.stages == ["load op libraries", "build model", "export", "compile", "verify"]


def test_spec_names_every_input_and_output(mixed: Exported) -> None:
    spec = ad.load(mixed.package.path).spec
    assert [t.name for t in spec.inputs] == ["x", "inputs_a", "inputs_b_0", "mask"]
    assert [t.name for t in spec.outputs] == ["out", "pair_0", "pair_1"]
    assert spec.outputs_by_name  # a dict: the names are the model's keys
    assert [str(d) for d in spec.inputs[0].dims] == ["1..8", "3"]
    assert {c["name"]: c["value"] for c in spec.constant_inputs} == {"n": 3, "flag": True, "sizes_0": 2, "sizes_1": 3}


@pytest.mark.parametrize("batch", [2, 5])
def test_call_returns_the_models_structure_with_eagers_values(mixed: Exported, batch: int) -> None:
    args, kwargs = mixed_call(batch, seed=batch)
    out = ad.load(mixed.package.path)(*args, **kwargs)
    with torch.no_grad():
        eager = mixed.model(*args, **kwargs)
    assert isinstance(out, dict) and list(out) == ["out", "pair"]
    assert isinstance(out["pair"], tuple) and len(out["pair"]) == 2
    torch.testing.assert_close(out["out"], eager["out"])
    torch.testing.assert_close(out["pair"][1], eager["pair"][1])


def test_verify_against_eager_and_the_cpp_runner(mixed: Exported) -> None:
    args, kwargs = mixed_call(7, seed=11)
    package = ad.load(mixed.package.path)
    eager = package.verify(args, kwargs, model=mixed.model)
    assert eager.passed, str(eager)
    assert [check.name for check in eager.outputs] == ["output 'out'", "output 'pair_0'", "output 'pair_1'"]
    cpp = package.verify(args, kwargs, against="cpp")
    # Runtimes of one package agree bit for bit.
    assert cpp.passed and cpp.bit_identical, str(cpp)
    assert cpp.tolerance.rule == "bitwise"
    # The same words in both sections of the API's report.
    assert [check.name for check in cpp.outputs] == [check.name for check in eager.outputs]


def test_verify_reports_where_a_wrong_model_differs(mixed: Exported) -> None:
    args, kwargs = mixed_call(2, seed=3)
    wrong = Mixed().eval()  # other random weights
    report = mixed.package.verify(args, kwargs, model=wrong)
    assert not report.passed
    failed = [check for check in report.outputs if not check.passed]
    assert failed and failed[0].first_index is not None and failed[0].max_abs > 0


def test_a_baked_in_value_other_than_the_exported_one_is_refused(mixed: Exported) -> None:
    args, kwargs = mixed_call(2, seed=0)
    changed = (args[0], args[1], 4, *args[3:])
    with pytest.raises(ad.InputError, match=r"input n was 3 at export.*got 4"):
        mixed.package(*changed, **kwargs)


def test_a_call_of_another_structure_is_refused(mixed: Exported) -> None:
    args, kwargs = mixed_call(2, seed=0)
    with pytest.raises(ad.InputError, match=r"keyword argument\(s\) \(mask\), got \(none\)"):
        mixed.package(*args)
    with pytest.raises(ad.InputError, match="structure the package was exported with"):
        mixed.package(args[0], {"a": args[1]["a"]}, *args[2:], **kwargs)


def test_a_shape_outside_the_dynamic_range_is_refused(mixed: Exported) -> None:
    args, kwargs = mixed_call(9, seed=0)
    with pytest.raises(ad.InputError, match="x"):
        mixed.package(*args, **kwargs)


def test_quickstart_example_runs_end_to_end(api_quickstart: QuickstartRun) -> None:
    """examples/api_quickstart.py as a user runs it: export with kwargs and a dict
    output, call, verify against eager and the C++ runner, bundle, Triton repository."""
    result, tmp_path = api_quickstart.result, api_quickstart.out_dir
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED against eager") == 2, result.stdout
    assert "PASSED against cpp (bitwise)" in result.stdout
    assert "{'scores': [2, 8], 'pooled': [2, 32]}" in result.stdout
    # Both sections of the report name the outputs by the dict's keys, as the runners do.
    # Against eager within tolerance (freezing packs the linears for oneDNN, which sums in
    # another order); against the C++ runner, the same bits.
    assert "  eager vs package [2, 8, 32] [2, 8] output 'scores': ok (" in result.stdout, result.stdout
    assert ("PASSED against cpp (bitwise)\n  output 'scores': ok (identical)\n  output 'pooled': ok (identical)"
            in result.stdout), result.stdout
    assert "output[" not in result.stdout, result.stdout
    config = (tmp_path / "triton_repository" / "scorer" / "config.pbtxt").read_text()
    assert 'name: "scorer"' in config, config
    assert (tmp_path / "scorer_bundle" / "model.pt2").is_file()


def test_non_contiguous_example_input_computes_right(tmp_path: Path, build: Build) -> None:
    """A package exported from a transposed (non-contiguous) example input: AOTI
    would compile the example's strides in while the runtimes pass contiguous
    tensors. The toolkit traces contiguous copies, so values are eager's."""

    class Affine(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * torch.arange(x.shape[1], dtype=x.dtype) + 1

    example = torch.randn(10, 12).t()  # 12 x 10, strides (1, 12)
    assert not example.is_contiguous()
    program = torch.export.export(Affine(), (example.contiguous(),))
    for model in (Affine(), program):  # an nn.Module, and an ExportedProgram compiled as it is
        package = ad.export(model, (example,), package_path=tmp_path / f"{type(model).__name__}.pt2")
        fresh = torch.randn(12, 10)
        expected = Affine()(fresh)
        assert same_bits(package(fresh), expected)
        assert same_bits(package(example), Affine()(example))
        assert package.verify((fresh,), against="cpp").bit_identical


def test_an_output_a_package_cannot_return_is_refused_before_the_compile(tmp_path: Path) -> None:
    """A Python int, float or bool output is carried (tests/test_scalar_outputs.py);
    None is not, and is refused before the compile, which takes seconds."""
    class CountOrNothing(nn.Module):
        def forward(self, x: torch.Tensor):
            return x * 2, x.shape[0], None

    stages: list[str] = []
    with pytest.raises(ad.ExportError, match=r"output output_2 is None; a package returns tensors and Python ints, "
                                             r"floats and bools"):
        ad.export(CountOrNothing(), (torch.randn(3, 2),), dynamic_shapes=({0: ad.Dim("n", min=2, max=9)},),
                  package_path=tmp_path / "count.pt2", on_stage=stages.append)
    assert "compile" not in stages
    assert not (tmp_path / "count.pt2").exists()


def test_python_only_ops_are_refused_with_the_fix(tmp_path: Path) -> None:
    """The example's op exists only in Python (torch.library.custom_op): the C++
    runtime could not run it, so the API refuses it and names the option."""
    with pytest.raises(ad.ExportError, match="calls python_only_example::double, which the C\\+\\+ runtime cannot run"
                       ".*allow_python_ops=True"):
        ad.export(PythonOpModel(), (torch.randn(2, 2),), package_path=tmp_path / "py.pt2")
    assert not (tmp_path / "py.pt2").exists()


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ([torch.randn(2)], None, None),
    ("x", None, "args must be a tuple"),
    ((torch.randn(2),), [1], "kwargs must be a dict"),
    ((object(),), None, r"example input args\[0\] is a object"),
])
def test_bad_arguments_are_refused_before_export(args, kwargs, message, tmp_path: Path) -> None:
    if message is None:  # a list of arguments is a tuple's equal
        from aoti_deploy.models.call import CallInputs

        assert isinstance(CallInputs.of(args).args, tuple)
        return
    with pytest.raises(ad.InputError, match=message):
        ad.export(nn.Identity(), args, kwargs, package_path=tmp_path / "bad.pt2")


def test_bad_tolerance_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ad.InputError, match="is not a rule"):
        ad.export(nn.Identity(), (torch.randn(2),), tolerance={"rtol": 1e-3}, package_path=tmp_path / "t.pt2")


def test_an_output_type_that_cannot_be_imported_comes_back_as_a_dict() -> None:
    """A treespec recorded with a type this process cannot import (e.g. a
    transformers ModelOutput without transformers) loads as a dict by its keys."""
    recorded = json.dumps([1, {"type": "not_installed_pkg.outputs.FancyOutput", "context": json.dumps(["logits", "hidden"]),
                               "children_spec": [{"type": None, "context": None, "children_spec": []}] * 2}])
    spec = load_treespec(recorded)
    assert spec is not None
    rebuilt = torch.utils._pytree.tree_unflatten([torch.zeros(1), torch.ones(1)], spec)
    assert isinstance(rebuilt, dict) and list(rebuilt) == ["logits", "hidden"]
    assert output_names(spec) == ["logits", "hidden"]
    assert load_treespec("not json") is None


def test_output_names_follow_the_structure() -> None:
    flat = torch.utils._pytree.tree_flatten
    assert output_names(flat(torch.zeros(1))[1]) == ["output"]
    assert output_names(flat((torch.zeros(1), torch.zeros(1)))[1]) == ["output_0", "output_1"]
    assert output_names(flat({"a": torch.zeros(1), "b": [torch.zeros(1)]})[1]) == ["a", "b_0"]
    assert output_names(flat({"x y": torch.zeros(1), "x_y": torch.zeros(1)})[1]) == ["x_y", "x_y_1"]


def test_only_a_dict_returns_its_outputs_by_name() -> None:
    """A dict (or an OrderedDict, or a ModelOutput: string keys at the top) names its
    outputs; a lone tensor, a tuple, a namedtuple, a dict of int keys or a dict inside
    a tuple returns them by position, and the runners index them."""
    from collections import OrderedDict, namedtuple

    from aoti_deploy.compiler.structure import returns_by_name

    z = torch.zeros(1)
    pair = namedtuple("pair", "a b")
    by_name = [{"a": z, "b": [z, z]}, OrderedDict(a=z), {"a": {"b": z}}]
    by_position = [z, (z, z), [z], pair(z, z), {0: z}, ({"a": z},)]
    flat = torch.utils._pytree.tree_flatten
    assert [returns_by_name(flat(out)[1]) for out in by_name] == [True] * len(by_name)
    assert [returns_by_name(flat(out)[1]) for out in by_position] == [False] * len(by_position)


def test_names_fit_the_spec_however_deep_the_key_path() -> None:
    """A spec refuses names over 128 characters: export cuts a deep key path and keeps
    the names unique, so a model with one never makes a malformed package."""
    from aoti_deploy.compiler.structure import MAX_NAME_LENGTH, bounded_names
    from aoti_deploy.package.spec import PackageSpec, TensorSpec, parse_document

    deep = {"a" * 100: {"b" * 100: torch.zeros(1), "b" * 100 + "c": torch.zeros(1)}}
    names = output_names(torch.utils._pytree.tree_flatten(deep)[1])
    assert all(len(name) <= MAX_NAME_LENGTH for name in names) and len(set(names)) == 2
    assert bounded_names(["x", "x"]) == ["x", "x_1"]
    spec = PackageSpec(inputs=[], outputs=[TensorSpec((), "float32", name=name) for name in names])
    assert [t.name for t in parse_document(spec.to_document()).outputs] == names


def test_public_api_is_listed() -> None:
    for name in ("export", "load", "Package", "Report", "Dim", "Tolerance", "VerificationError", "InputError"):
        assert name in ad.__all__ and getattr(ad, name) is not None
    assert ad.Dim is torch.export.Dim


def test_scorer_model_is_importable() -> None:
    args, kwargs = example_call()
    out = Scorer().eval()(*args, **kwargs)
    assert set(out) == {"scores", "pooled"}


def test_inductor_configs_are_checked_recorded_and_shown_by_both_inspectors(tmp_path: Path, build: Build) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(2, 8)
    with pytest.raises(ad.InputError, match="did you mean freezing"):
        ad.export(model, (x,), inductor_configs={"freezng": True}, package_path=tmp_path / "bad.pt2")
    with pytest.raises(ad.InputError, match="set by the toolkit itself"):
        ad.export(model, (x,), inductor_configs={"aot_inductor.metadata": "x"}, package_path=tmp_path / "bad.pt2")
    package = ad.export(model, (x,), inductor_configs={"freezing": True, "cpp.threads": 2},
                        package_path=tmp_path / "frozen.pt2")
    assert package.report.passed, str(package.report)
    assert package.spec.inductor_configs == {"freezing": True, "cpp.threads": 2}
    assert dict(package.spec.describe())["inductor configs"] == "cpp.threads=2, freezing=true"
    cpp = subprocess.run([str(build.runner), str(package.path), "--inspect"], capture_output=True, text=True, timeout=120)
    assert cpp.returncode == 0, cpp.stderr
    assert "inductor configs: cpp.threads=2, freezing=true" in cpp.stdout.splitlines()
    assert package.verify((torch.randn(2, 8),), against="cpp").bit_identical


def test_export_stages_go_to_the_logger_and_the_callback(caplog) -> None:
    """Progress for an API user: each stage to the aoti_deploy logger (INFO), with the
    time the one before took, and to on_stage."""
    import logging

    from aoti_deploy.api import _logged_stages

    seen: list[str] = []
    stage = _logged_stages(seen.append)
    with caplog.at_level(logging.INFO, logger="aoti_deploy"):
        stage("export")
        stage("compile")
    assert seen == ["export", "compile"]
    lines = [record.getMessage() for record in caplog.records if record.name == "aoti_deploy"]
    assert lines[0] == "export: export" and lines[-1] == "export: compile"
    assert any(line.startswith("export: export took ") and line.endswith(" s") for line in lines)


def test_an_api_export_leaves_sys_path_alone(tmp_path: Path) -> None:
    """From a project folder that holds a Triton model repository named triton/, an
    API export used to put the folder first on sys.path, and torch then imported that
    folder as the triton package. The API never changes sys.path (only the CLIs'
    --model and --fake-module read the working folder)."""
    import subprocess
    import sys

    project = tmp_path / "project"
    (project / "triton" / "model" / "1").mkdir(parents=True)
    script = tmp_path / "export_here.py"
    script.write_text(
        "import os, sys, torch, aoti_deploy\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())\n"
        "package = aoti_deploy.export(model, (torch.randn(2, 4),), package_path='model.pt2')\n"
        "print('exported', package.path.name, 'cwd on sys.path:', os.getcwd() in sys.path or '' in sys.path)\n"
    )
    result = subprocess.run([sys.executable, str(script)], cwd=project, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "exported model.pt2 cwd on sys.path: False" in result.stdout
