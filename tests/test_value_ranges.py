"""Integer inputs that index tensors: export records the values each may hold, and both
runners (as processes) refuse any other value with one line and exit 2, where the
compiled kernel would abort the process from an OpenMP region. In-range ids, bounds
included, and random ids drawn from the recorded ranges run with equal bits."""

from __future__ import annotations

import resource
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import REPO_ROOT, Build, UserPackage, edit_spec, run_cli, run_cmd
from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.cli.parsing import parse_input_values
from aoti_deploy.compiler.value_ranges import DECLARED, record_value_ranges, value_ranges
from aoti_deploy.compiler.export import input_specs
from aoti_deploy.errors import InputError
from aoti_deploy.package.archive import read_package_metadata, read_package_spec
from aoti_deploy.package.spec import SPEC_KEY, ValueRange
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import bit_view

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from examples.index_models import LookupModel, lookup_inputs  # noqa: E402

EMBEDDING = ValueRange(0, 999, "embedding rows 0..999")
ROWS = ValueRange(0, 9, "index_select over dim 0 of size 12; tensor indexing of dim 0 of size 10, negatives wrap")
PICKS = ValueRange(0, 6, "gather along dim 1 of size 7")
SLOTS = ValueRange(-9, 8, "tensor indexing of dim 0 of size 9, negatives wrap")


# LookupModel's forward arguments: the package names its inputs by them.
LOOKUP_NAMES = ("ids", "rows", "picks", "slots")


def line(i: int, value: int, position: tuple[int, int], allowed: ValueRange) -> str:
    return (f"input[{i}] ({LOOKUP_NAMES[i]}): value {value} at {list(position)} is outside {allowed} (this input "
            f"indexes: {allowed.why}). Pass values in {allowed}.")


# input, position, value: each refused by both runners with its line.
BAD_VALUES = {
    "id far above the vocabulary": (0, (1, 3), 5000, EMBEDDING),
    "id one past the last row": (0, (0, 0), 1000, EMBEDDING),
    "negative id": (0, (0, 5), -7, EMBEDDING),
    "row valid in the bigger table only": (1, (1, 2), 10, ROWS),
    "negative row, which index_select refuses": (1, (0, 1), -1, ROWS),
    "gather index one past its dim": (2, (1, 0), 7, PICKS),
    "slot one past the end": (3, (1, 1), 9, SLOTS),
    "negative slot past the wrap": (3, (0, 2), -10, SLOTS),
}


def _same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(bit_view(x), bit_view(y)) for x, y in zip(a, b)
    )


def _no_core() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_both(build: Build, package: Path, tmp: Path, inputs: Path | None) -> tuple[object, object]:
    """run_inference and aoti_runner, each as its own process (an abort must not take
    the test run with it), writing py.pt and cpp.pt."""
    given = ["--inputs", inputs] if inputs is not None else []
    py = run_cli("run_inference", package, *given, "--outputs", tmp / "py.pt", cwd=tmp, build=build)
    cpp = run_cmd(build.runner, package, *given, "--outputs", tmp / "cpp.pt", preexec_fn=_no_core)
    return py, cpp


# --- what export records ---------------------------------------------------------------

def test_the_package_records_each_index_inputs_values(lookup_package: UserPackage) -> None:
    spec = read_package_spec(lookup_package.path)
    assert [s.values for s in spec.inputs] == [EMBEDDING, ROWS, PICKS, SLOTS]
    assert "input[1] values" in lookup_package.output


def test_both_inspections_show_the_ranges(lookup_package: UserPackage, build: Build, tmp_path: Path) -> None:
    cpp = run_cmd(build.runner, lookup_package.path, "--inspect")
    assert cpp.returncode == 0, cpp.stderr
    cpp_rows = [tuple(line.split(": ", 1)) if ": " in line else (line.rstrip(":"), "")
                for line in cpp.stdout.splitlines()[1:]]
    assert cpp_rows == read_package_spec(lookup_package.path).describe()
    name = read_package_spec(lookup_package.path).inputs[0].name
    assert cpp_rows[:2] == [("input[0]", f"{name + '  ' if name else ''}[1..8, 64] int64"),
                            ("input[0] values", "0..999 (embedding rows 0..999)")]
    assert ("input[3] values", f"-9..8 ({SLOTS.why})") in cpp_rows
    py = run_cli("aoti-deploy", "inspect", lookup_package.path, "--json", cwd=tmp_path, build=build)
    assert py.returncode == 0, py.stderr
    assert '"why": "embedding rows 0..999"' in py.stdout


def test_the_compiled_check_sits_in_an_openmp_region(lookup_package: UserPackage) -> None:
    """The cause of the abort: the embedding kernel checks its index inside
    `#pragma omp parallel`, which no exception can leave."""
    with zipfile.ZipFile(lookup_package.path) as archive:
        kernels = [archive.read(name).decode() for name in archive.namelist() if name.endswith("kernel.cpp")]
    checked = [k for k in kernels if "index out of bounds: 0 <= tmp" in k and "< 1000L" in k]
    assert checked, "no bounds check of the embedding's 1000 rows in the generated kernels"
    source = checked[0]
    assert source.index("#pragma omp parallel") < source.index("index out of bounds: 0 <= tmp")


def test_without_the_recorded_range_the_packages_own_check_refuses_a_bad_id(lookup_package: UserPackage,
                                                                           build: Build, tmp_path: Path) -> None:
    """The same package with its ranges removed from the spec: the runner reaches the
    package's own index check (index_guards.py), which fails the run in serial code
    before the kernel that would abort the process (SIGABRT, "terminate called") runs."""
    import json

    document = json.loads(read_package_metadata(lookup_package.path)[SPEC_KEY])
    bare_inputs = [{k: v for k, v in item.items() if k != "values"} for item in document["inputs"]]
    bare = edit_spec(lookup_package.path, tmp_path / "bare.pt2", inputs=bare_inputs)
    inputs = list(lookup_inputs())
    inputs[0][1, 3] = 5000
    result = run_cmd(build.runner, bare, "--inputs", save_tensors(tmp_path / "in.pt", inputs), preexec_fn=_no_core)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "terminate called" not in result.stderr
    assert result.stderr.splitlines() == [
        f"aoti_runner: error: running the AOTI package {bare} failed: index out of range: embedding in 'embedding' "
        "takes indices in 0..999 (its rows, 1000); an index of input[0] (ids) is outside it. Pass inputs whose "
        "indices fall in 0..999."]


# --- both runners -----------------------------------------------------------------------

def test_in_range_ids_at_every_bound_run_with_eagers_bits(lookup_package: UserPackage, build: Build,
                                                          tmp_path: Path) -> None:
    inputs = list(lookup_inputs(batch=3, seed=11))
    with torch.no_grad():
        eager = list(LookupModel()(*inputs))
    py, cpp = _run_both(build, lookup_package.path, tmp_path, save_tensors(tmp_path / "in.pt", inputs))
    assert py.returncode == 0, py.stdout + py.stderr
    assert cpp.returncode == 0, cpp.stdout + cpp.stderr
    assert _same_bits(torch.load(tmp_path / "py.pt"), eager)
    assert _same_bits(torch.load(tmp_path / "cpp.pt"), eager)


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_a_bad_value_is_refused_with_one_line_by_both(case: str, lookup_package: UserPackage, build: Build,
                                                      tmp_path: Path) -> None:
    i, position, value, allowed = BAD_VALUES[case]
    assert tuple(t.name for t in read_package_spec(lookup_package.path).inputs) == LOOKUP_NAMES
    inputs = list(lookup_inputs())
    inputs[i][position] = value
    py, cpp = _run_both(build, lookup_package.path, tmp_path, save_tensors(tmp_path / "in.pt", inputs))
    expected = line(i, value, position, allowed)
    for result in (py, cpp):
        output = result.stdout + result.stderr
        assert result.returncode == 2, (result.returncode, output[-2000:])
        assert expected in output.splitlines()[-1], output[-2000:]
        assert "terminate called" not in output and "frame #" not in output and "Traceback" not in output
    assert not (tmp_path / "py.pt").exists() and not (tmp_path / "cpp.pt").exists()


def test_random_ids_are_drawn_in_range_with_equal_bits(lookup_package: UserPackage, build: Build,
                                                       tmp_path: Path) -> None:
    """No --inputs: both runners draw the same ids from the recorded ranges and run."""
    py, cpp = _run_both(build, lookup_package.path, tmp_path, None)
    assert py.returncode == 0, py.stdout + py.stderr
    assert cpp.returncode == 0, cpp.stdout + cpp.stderr
    assert _same_bits(torch.load(tmp_path / "py.pt"), torch.load(tmp_path / "cpp.pt"))


# --- the analysis, on exported programs (no compile) ----------------------------------

def _export(model: torch.nn.Module, *inputs: torch.Tensor, dynamic_shapes: object = None) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(model.eval(), inputs, dynamic_shapes=dynamic_shapes)


class _ComputedIds(torch.nn.Module):
    """An id computed by arithmetic before it indexes: the analysis does not follow it."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(50, 4)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids + 1) * x


class _Casts(torch.nn.Module):
    """A widening cast keeps every value (followed); a narrowing one may not (not followed)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(30, 4)

    def forward(self, narrow: torch.Tensor, wide: torch.Tensor) -> torch.Tensor:
        return self.embedding(narrow.to(torch.int32)) + self.embedding(wide.to(torch.int64))


class _DynamicTable(torch.nn.Module):
    def forward(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return table[idx]


def test_the_analysis_follows_views_and_intersects_uses() -> None:
    program = _export(LookupModel(), *lookup_inputs())
    assert value_ranges(program) == {0: EMBEDDING, 1: ROWS, 2: PICKS, 3: SLOTS}


def test_casts_are_followed_only_when_they_keep_every_value() -> None:
    program = _export(_Casts(), torch.tensor([1, 2]), torch.tensor([3, 4], dtype=torch.int32))
    assert value_ranges(program) == {1: ValueRange(0, 29, "embedding rows 0..29")}


def test_a_dynamic_table_bounds_by_its_largest_size() -> None:
    size = torch.export.Dim("rows", min=2, max=50)
    program = _export(_DynamicTable(), torch.randn(5, 3), torch.tensor([1, 2]), dynamic_shapes=({0: size}, None))
    assert value_ranges(program) == {1: ValueRange(-50, 49, "tensor indexing of dim 0 of size up to 50, negatives wrap")}


def test_a_computed_id_is_not_followed_and_a_declared_range_covers_it() -> None:
    program = _export(_ComputedIds(), torch.tensor([[1, 2]]), torch.randn(1, 2, 4))
    assert value_ranges(program) == {}
    inputs = record_value_ranges(program, input_specs(program), {0: (-1, 48)})
    assert [s.values for s in inputs] == [ValueRange(-1, 48, DECLARED), None]


def test_a_declared_range_intersects_what_export_found() -> None:
    program = _export(LookupModel(), *lookup_inputs())
    inputs = record_value_ranges(program, input_specs(program), {0: (0, 499), 3: (-100, 100)})
    assert inputs[0].values == ValueRange(0, 499, f"embedding rows 0..999; {DECLARED}")
    assert inputs[3].values == ValueRange(-9, 8, f"{SLOTS.why}; {DECLARED}")


@pytest.mark.parametrize(("declared", "words"), [
    ({4: (0, 9)}, "the model has 4 input(s)"),
    ({0: (1000, 2000)}, "no value in it is valid"),
    ({0: (-1, 2**63)}, "expected MIN <= MAX within int64"),
])
def test_a_declared_range_that_cannot_hold_is_refused(declared: dict, words: str) -> None:
    program = _export(LookupModel(), *lookup_inputs())
    with pytest.raises(InputError) as error:
        record_value_ranges(program, input_specs(program), declared)
    assert words in str(error.value)


def test_a_declared_range_on_a_float_input_is_refused() -> None:
    program = _export(_ComputedIds(), torch.tensor([[1, 2]]), torch.randn(1, 2, 4))
    with pytest.raises(InputError) as error:
        record_value_ranges(program, input_specs(program), {1: (0, 9)})
    assert "input 1 is float32; a value range applies to an integer input" in str(error.value)


# --- the CLI option ------------------------------------------------------------------------

def test_input_values_parse() -> None:
    assert parse_input_values(["0=0:999", "2=-9:8"]) == {0: (0, 999), 2: (-9, 8)}
    for bad, words in [("0=9:0", "the range is empty"), ("0:999", "expected INPUT=MIN:MAX"),
                       ("a=0:9", "expected INPUT=MIN:MAX")]:
        with pytest.raises(InputError) as error:
            parse_input_values([bad])
        assert words in str(error.value)
    with pytest.raises(InputError, match="has a range already"):
        parse_input_values(["0=0:9", "0=1:2"])


def test_input_values_with_the_identity_model_is_refused() -> None:
    result = CliRunner().invoke(export_compile_app, ["--input-values", "0=0:9", "--output", "unused.pt2"])
    assert result.exit_code == 2, result.output
    assert "--input-values applies to a model given with --model" in result.output
