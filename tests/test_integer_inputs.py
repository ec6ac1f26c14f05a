"""Integer and bool inputs get the service float inputs get: export_compile --dtype
int64 for a --model given shapes, seeded random values (in the recorded value range,
else 0 and 1) in export_compile, both runners and serve's self-check, and the check
against eager at a second shape."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, Build, UserPackage, _export, run_cli, run_cmd
from aoti_deploy.compiler.eager_check import second_inputs
from aoti_deploy.models.example import FactorySource, IdentitySource, seeded_input
from aoti_deploy.errors import InputError
from aoti_deploy.models.user import DynamicDim
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import PackageSpec, TensorSpec, DimSpec, ValueRange
from aoti_deploy.runtime.random_inputs import make_random_inputs
from aoti_deploy.verify.bits import bit_view

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MASKED_MEAN = [
    "--model", "examples.index_models:masked_mean_model", "--dtype", "int64",
    "--input-shape", "2,16", "--input-shape", "2,16", "--input-values", "0=0:999",
    "--dynamic-dim", "0.0,1.0=1:8", "--dynamic-dim", "0.1,1.1=2:64",
]


@pytest.fixture(scope="module")
def masked_mean_package(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """The one compile of this file: two int64 inputs drawn at random by export_compile,
    dynamic batch and sequence."""
    out = tmp_path_factory.mktemp("masked_mean")
    code, output = _export(MASKED_MEAN + ["--save-reference", str(out / "ref"), "--output", str(out / "model.pt2")])
    assert code == 0, output
    return UserPackage(out / "model.pt2", out / "ref", code, output)


def test_export_compile_draws_integer_inputs_and_checks_a_second_shape(masked_mean_package: UserPackage) -> None:
    spec = read_package_spec(masked_mean_package.path)
    assert [t.dtype for t in spec.inputs] == ["int64", "int64"]
    # The ids' range is declared and intersected with the embedding's; the mask indexes nothing.
    assert (spec.inputs[0].values.min, spec.inputs[0].values.max) == (0, 999) and spec.inputs[1].values is None
    inputs = torch.load(masked_mean_package.reference / "inputs.pt")
    assert inputs[0].dtype == torch.int64 and 0 <= int(inputs[0].min()) and int(inputs[0].max()) <= 999
    assert int(inputs[0].max()) > 1  # drawn over the declared range, not 0 and 1
    assert sorted(inputs[1].unique().tolist()) == [0, 1]
    # The check against eager ran at the example shape and at a larger one.
    labels = [label for label, _ in spec.verified]
    assert labels == ["eager vs package [2, 16] [2, 16]", "eager vs package [3, 17] [3, 17]"], labels


def test_both_runners_draw_the_same_integer_inputs(masked_mean_package: UserPackage, build: Build,
                                                   tmp_path: Path) -> None:
    """No --inputs, at another shape: the ids from the recorded range, the mask 0 or 1, the
    same bits in both runners (which agree on the inputs, so on the outputs)."""
    shape = ["--input-shape", "5,40", "--input-shape", "5,40"]
    py = run_cli("run_inference", masked_mean_package.path, *shape, "--seed", "3", "--outputs", tmp_path / "py.pt",
                 cwd=tmp_path, build=build)
    cpp = run_cmd(build.runner, masked_mean_package.path, *shape, "--seed", "3", "--outputs", tmp_path / "cpp.pt")
    assert py.returncode == 0, py.stdout + py.stderr
    assert cpp.returncode == 0, cpp.stdout + cpp.stderr
    assert "input[1] (mask): [5, 40] int64 on cpu" in py.stdout and "input[1] (mask): [5, 40] int64 on cpu" in cpp.stdout
    py_out, cpp_out = torch.load(tmp_path / "py.pt"), torch.load(tmp_path / "cpp.pt")
    assert torch.equal(bit_view(py_out[0]), bit_view(cpp_out[0]))
    # And they are what eager computes for the inputs both draw.
    from examples.index_models import masked_mean_model

    drawn = make_random_inputs(read_package_spec(masked_mean_package.path), 3, [(5, 40), (5, 40)])
    assert sorted(drawn[1].unique().tolist()) == [0, 1] and int(drawn[0].max()) > 1
    with torch.no_grad():
        torch.testing.assert_close(py_out[0], masked_mean_model()(*drawn))


# --- units (no compile) -----------------------------------------------------------------

def test_an_integer_dtype_is_for_a_models_inputs_only() -> None:
    FactorySource("m:f", dtype="int64").check()
    FactorySource("m:f", dtype="bool").check()
    with pytest.raises(InputError, match="--dtype int32 applies to the inputs of a model given with --model"):
        IdentitySource(dtype="int32").check()
    with pytest.raises(InputError, match="unsupported dtype 'complex64'"):
        FactorySource("m:f", dtype="complex64").check()


def test_export_compile_cli_takes_integer_dtypes(tmp_path: Path) -> None:
    code, output = _export(["--dtype", "int64", "--output", str(tmp_path / "m.pt2")])
    assert code == 2 and "--dtype int64 applies to the inputs of a model given with --model" in output, output


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64"])
def test_seeded_integer_inputs(dtype: str) -> None:
    x = seeded_input((4, 50), dtype, "cpu", 0)
    assert x.dtype == getattr(torch, dtype) and x.shape == (4, 50)
    assert sorted(x.to(torch.int64).unique().tolist()) == [0, 1]
    assert torch.equal(x, seeded_input((4, 50), dtype, "cpu", 0))
    if dtype != "bool":
        wide = seeded_input((4, 50), dtype, "cpu", 0, (-3, 90) if dtype != "uint8" else (3, 90))
        assert wide.min() >= (-3 if dtype != "uint8" else 3) and wide.max() <= 90 and wide.unique().numel() > 10


def test_second_inputs_grow_for_integer_inputs_and_keep_their_values() -> None:
    ids = torch.tensor([[5, 9, 7], [6, 5, 8]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    x = torch.randn(2, 3)
    dims = [DynamicDim(((0, 0), (1, 0), (2, 0)), 1, 8), DynamicDim(((0, 1), (1, 1), (2, 1)), 2, 3)]
    ids2, mask2, x2 = second_inputs([ids, mask, x], dims, seed=0)
    # One above the example where the range allows, else the other way.
    assert ids2.shape == mask2.shape == x2.shape == (3, 2)
    assert ids2.dtype == torch.int64 and mask2.dtype == torch.bool and x2.dtype == torch.float32
    assert 5 <= int(ids2.min()) and int(ids2.max()) <= 9
    # Floating inputs only: as before, each dynamic dim at its minimum.
    (y,) = second_inputs([x], [DynamicDim(((0, 0),), 1, 8)], seed=0)
    assert y.shape == (1, 3)
    assert second_inputs([torch.zeros(2, dtype=torch.complex64)], [DynamicDim(((0, 0),), 1, 8)], seed=0) is None


def test_serve_draws_what_the_runners_draw() -> None:
    """serve's self-check sends the runners' random inputs: ids in their recorded range,
    other integer inputs 0 or 1, so no request can abort a kernel."""
    from aoti_deploy.serve.serve_check import request_inputs
    from aoti_deploy.serve.served_models import ServedModel

    dims = (DimSpec(2, 2), DimSpec(6, 6))
    spec = PackageSpec(
        inputs=[TensorSpec(dims, "int64", ValueRange(0, 9, "embedding rows 0..9")), TensorSpec(dims, "int32"),
                TensorSpec(dims, "bool"), TensorSpec(dims, "float32")],
        example_shapes=[(2, 6)] * 4,
    )
    sets = request_inputs(ServedModel("m", None, 1, Path("."), spec), 3)
    assert [s.special for s in sets] == [False] * 3  # special values need floating inputs only
    for seed, request in enumerate(sets):
        expected = make_random_inputs(spec, seed)
        assert all(torch.equal(a, b) for a, b in zip(request.inputs, expected))
        ids, other, flags, _ = request.inputs
        assert 0 <= int(ids.min()) and int(ids.max()) <= 9
        assert set(other.unique().tolist()) <= {0, 1} and flags.dtype == torch.bool
