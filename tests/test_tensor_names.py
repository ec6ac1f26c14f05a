"""Inputs and outputs by the model's names: packages whose spec records names (made
here by rewriting the spec of the suite's packages) are inspected, validated and fed
alike by aoti_runner and run_inference, each run as a process; a tensor file may be a
dict of name -> tensor, mapped to the spec's order, and a missing or unknown name is
refused (exit 2) with the expected names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from aoti_deploy.package.archive import read_package_metadata, read_package_spec
from aoti_deploy.package.spec import SPEC_KEY, DimSpec, PackageSpec, TensorSpec

from conftest import Build, CompiledPackage, UserPackage, edit_spec, run_cli, run_cmd
from test_hostile_files import rewrite_zip

LOOKUP_INPUTS = ["ids", "rows", "picks", "slots"]
LOOKUP_OUTPUTS = ["embedded", "selected", "picked", "slotted"]


def with_names(source: Path, target: Path, inputs: list[str], outputs: list[str]) -> Path:
    """A copy of a package whose spec names its inputs and outputs."""
    document = json.loads(read_package_metadata(source)[SPEC_KEY])
    for item, name in zip(document["inputs"], inputs, strict=True):
        item["name"] = name
    for item, name in zip(document["outputs"], outputs, strict=True):
        item["name"] = name
    return edit_spec(source, target, inputs=document["inputs"], outputs=document["outputs"])


@pytest.fixture(scope="module")
def named_demo(compiled_package: CompiledPackage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's identity package ([2, 3, 8, 12] float32), input "pixels", output "restored"."""
    return with_names(compiled_package.path, tmp_path_factory.mktemp("named") / "demo.pt2", ["pixels"], ["restored"])


@pytest.fixture(scope="module")
def named_lookup(lookup_package: UserPackage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LookupModel (four int64 inputs, four outputs), named after its forward's arguments."""
    target = tmp_path_factory.mktemp("named") / "lookup.pt2"
    return with_names(lookup_package.path, target, LOOKUP_INPUTS, LOOKUP_OUTPUTS)


@pytest.fixture(scope="module")
def by_name_lookup(named_lookup: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """named_lookup as a model that returns its four outputs in a dict: outputs_by_name."""
    return edit_spec(named_lookup, tmp_path_factory.mktemp("named") / "lookup_by_name.pt2", outputs_by_name=True)


@dataclass(frozen=True)
class Ran:
    code: int
    text: str
    outputs: Path


def run_both(build: Build, package: Path, tmp: Path, *args: object) -> dict[str, Ran]:
    """aoti_runner and run_inference on the same arguments, each as a process, with
    --outputs; neither may die of a signal or a traceback."""
    results = {}
    for runtime in ("cpp", "python"):
        outputs = tmp / f"out_{runtime}.pt"
        libraries = [] if "lookup" in package.name else [build.op_library]
        if runtime == "cpp":
            done = run_cmd(build.runner, package, *libraries, *args, "--outputs", outputs)
        else:
            done = run_cli("run_inference", package, *libraries, *args, "--outputs", outputs, cwd=tmp, build=build)
        text = done.stdout + done.stderr
        assert done.returncode >= 0 and "terminate called" not in text and "Traceback" not in text, text
        results[runtime] = Ran(done.returncode, text, outputs)
    return results


# --- the spec --------------------------------------------------------------------------

def test_a_name_is_written_only_when_recorded() -> None:
    dims = (DimSpec(2, 2),)
    unnamed = TensorSpec(dims, "float32")  # positional construction, as before names
    assert "name" not in unnamed.to_document()
    named = TensorSpec(dims, "float32", name="input_ids")
    assert named.to_document()["name"] == "input_ids"
    spec = PackageSpec(inputs=[named], outputs=[TensorSpec(dims, "float32", name="logits")])
    parsed = PackageSpec.from_metadata(spec.to_metadata())
    assert parsed.inputs == spec.inputs and parsed.outputs == spec.outputs
    assert spec.written_schema_version() == 2  # no version bump: older readers ignore the key


def test_python_written_names_parse_the_same_in_cpp(build: Build, tmp_path: Path) -> None:
    dims = (DimSpec(1, 8), DimSpec(16, 16))
    spec = PackageSpec(
        inputs=[TensorSpec(dims, "int64", name="input_ids"), TensorSpec(dims, "int64", name="attention_mask")],
        outputs=[TensorSpec(dims, "float32", name="encoder.last_hidden_state")],
    )
    vectors = tmp_path / "vectors.json"
    vectors.write_text(json.dumps({"vectors": [{"name": "written", "metadata": spec.to_metadata()}]}))
    result = run_cmd(build.dir / "contract_vectors", "spec", vectors)
    assert result.returncode == 0, result.stderr
    parsed = json.loads(result.stdout)["written"]["ok"]
    assert [item["name"] for item in parsed["inputs"]] == ["input_ids", "attention_mask"]
    assert parsed["outputs"][0]["name"] == "encoder.last_hidden_state"


def test_both_inspections_show_the_names_alike(named_lookup: Path, build: Build, tmp_path: Path) -> None:
    cpp = run_cmd(build.runner, named_lookup, "--inspect")
    assert cpp.returncode == 0, cpp.stderr
    cpp_rows = [tuple(line.split(": ", 1)) if ": " in line else (line.rstrip(":"), "")
                for line in cpp.stdout.splitlines()[1:]]
    assert cpp_rows == read_package_spec(named_lookup).describe()
    rows = dict(cpp_rows)
    assert rows["input[0]"] == "ids  [1..8, 64] int64"
    assert rows["input[0] values"] == "0..999 (embedding rows 0..999)"  # still under its input
    assert rows["output[3]"].startswith("slotted  [1..8, 3")
    py = run_cli("aoti-deploy", "inspect", named_lookup, cwd=tmp_path, build=build)
    assert py.returncode == 0, py.stderr
    assert "ids  [1..8, 64] int64" in py.stdout and "slotted  [1..8, 3" in py.stdout


# --- validation messages -----------------------------------------------------------------

def test_a_bad_input_is_named_by_both_runners(named_demo: Path, build: Build, tmp_path: Path) -> None:
    torch.save([torch.randn(2, 3, 8, 13)], tmp_path / "bad.pt")
    for runtime, ran in run_both(build, named_demo, tmp_path, "--inputs", tmp_path / "bad.pt").items():
        assert ran.code == 2, ran.text
        assert "input[0] (pixels): dim 3 expected 12, got 13" in ran.text, (runtime, ran.text)
        assert not ran.outputs.exists()


def test_a_bad_index_is_named_by_both_runners(named_lookup: Path, lookup_package: UserPackage, build: Build,
                                               tmp_path: Path) -> None:
    inputs = torch.load(lookup_package.reference / "inputs.pt")
    inputs[0] = inputs[0].clone()
    inputs[0][1, 5] = 1000
    torch.save(dict(zip(LOOKUP_INPUTS, inputs)), tmp_path / "bad.pt")
    for runtime, ran in run_both(build, named_lookup, tmp_path, "--inputs", tmp_path / "bad.pt").items():
        assert ran.code == 2, ran.text
        assert "input[0] (ids): value 1000 at [1, 5] is outside [0, 999]" in ran.text, (runtime, ran.text)


# --- tensor files by name ----------------------------------------------------------------

def test_inputs_and_references_by_name_run_alike_in_both(named_lookup: Path, lookup_package: UserPackage,
                                                         build: Build, tmp_path: Path) -> None:
    """A dict in another order than the spec's is put in the spec's order: the outputs
    are the package's reference outputs, and --expected by output name passes."""
    inputs = torch.load(lookup_package.reference / "inputs.pt")
    expected = torch.load(lookup_package.reference / "expected.pt")
    torch.save({name: inputs[i] for i, name in reversed(list(enumerate(LOOKUP_INPUTS)))}, tmp_path / "in.pt")
    torch.save({name: expected[k] for k, name in reversed(list(enumerate(LOOKUP_OUTPUTS)))}, tmp_path / "exp.pt")
    results = run_both(build, named_lookup, tmp_path, "--inputs", tmp_path / "in.pt", "--expected", tmp_path / "exp.pt")
    for runtime, ran in results.items():
        assert ran.code == 0, (runtime, ran.text)
        assert "input[1] (rows): [2, 4] int64 on cpu" in ran.text, (runtime, ran.text)
        assert "verify: output[0] vs expected[0] (bitwise): identical" in ran.text, (runtime, ran.text)
        outputs = torch.load(ran.outputs)
        assert len(outputs) == 4  # names, but not the model's keys (no outputs_by_name): --outputs stay a list
        for got, want in zip(outputs, expected):
            assert got.dtype == want.dtype and torch.equal(got.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8))


def test_outputs_by_name_are_printed_and_written_by_name_by_both(by_name_lookup: Path, lookup_package: UserPackage,
                                                                build: Build, tmp_path: Path) -> None:
    """A package whose model returns its outputs by name: both runners name every output
    in every check with the same words, and write --outputs as a dict by name in the
    package's order, bit for bit the reference outputs; --expected may be a list."""
    ref = lookup_package.reference
    expected = torch.load(ref / "expected.pt")
    results = run_both(build, by_name_lookup, tmp_path, "--inputs", ref / "inputs.pt", "--expected", ref / "expected.pt")
    lines = {}
    for runtime, ran in results.items():
        assert ran.code == 0, (runtime, ran.text)
        lines[runtime] = [line for line in ran.text.splitlines() if line.startswith("verify: ")]
        assert lines[runtime] == [f"verify: output '{name}' vs expected '{name}' (bitwise): identical"
                                  for name in LOOKUP_OUTPUTS], (runtime, ran.text)
        written = torch.load(ran.outputs, weights_only=True)
        assert type(written) is dict and list(written) == LOOKUP_OUTPUTS, (runtime, written)
        for got, want in zip(written.values(), expected):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)), runtime
    assert lines["cpp"] == lines["python"]


def test_a_list_still_runs_a_named_package(named_lookup: Path, lookup_package: UserPackage, build: Build,
                                           tmp_path: Path) -> None:
    ref = lookup_package.reference
    for runtime, ran in run_both(build, named_lookup, tmp_path, "--inputs", ref / "inputs.pt",
                                 "--expected", ref / "expected.pt").items():
        assert ran.code == 0, (runtime, ran.text)


@dataclass(frozen=True)
class NameCase:
    id: str
    flag: str  # --inputs or --expected
    content: object  # what torch.save writes
    words: tuple[str, ...]  # what both messages hold


def _lookup_inputs(ref: Path) -> dict[str, torch.Tensor]:
    return dict(zip(LOOKUP_INPUTS, torch.load(ref / "inputs.pt")))


EXPECTED_INPUTS = "The package's inputs are ids, rows, picks, slots"
EXPECTED_OUTPUTS = "The package's outputs are embedded, selected, picked, slotted"
NAME_CASES = [
    NameCase("missing", "--inputs", lambda t: {k: v for k, v in t.items() if k != "picks"},
             ("missing input(s) picks", EXPECTED_INPUTS)),
    NameCase("unknown", "--inputs", lambda t: {("id" if k == "ids" else k): v for k, v in t.items()},
             ("missing input(s) ids", 'unknown name(s) "id"', EXPECTED_INPUTS)),
    NameCase("extra", "--inputs", lambda t: {**t, "attention_mask": t["ids"]},
             ('unknown name(s) "attention_mask"', EXPECTED_INPUTS)),
    NameCase("not-a-tensor", "--inputs", lambda t: {**t, "rows": [1, 2]}, ('the entry "rows" is of type',
                                                                            "expected a tensor")),
    NameCase("not-a-string-key", "--inputs", lambda t: {0: t["ids"]}, ("holds a dict with a key of type",
                                                                       "tensor names (strings)")),
    NameCase("empty", "--inputs", lambda t: {}, ("missing input(s) ids, rows, picks, slots", EXPECTED_INPUTS)),
    NameCase("expected-unknown", "--expected", lambda t: {"logits": t["ids"]},
             ("missing output(s) embedded, selected, picked, slotted", 'unknown name(s) "logits"', EXPECTED_OUTPUTS)),
]


@pytest.mark.parametrize("case", NAME_CASES, ids=[case.id for case in NAME_CASES])
def test_a_wrong_name_is_refused_by_both(case: NameCase, named_lookup: Path, lookup_package: UserPackage,
                                         build: Build, tmp_path: Path) -> None:
    crafted = tmp_path / "named.pt"
    torch.save(case.content(_lookup_inputs(lookup_package.reference)), crafted)
    args = ["--inputs", crafted] if case.flag == "--inputs" else [
        "--inputs", lookup_package.reference / "inputs.pt", "--expected", crafted]
    for runtime, ran in run_both(build, named_lookup, tmp_path, *args).items():
        assert ran.code == 2, (runtime, ran.text)
        assert str(crafted) in ran.text, (runtime, ran.text)
        for words in case.words:
            assert words in ran.text, (runtime, words, ran.text)
        assert not ran.outputs.exists(), runtime


def test_a_dict_for_a_package_without_names_is_refused(compiled_package: CompiledPackage, build: Build,
                                                      tmp_path: Path) -> None:
    document = json.loads(read_package_metadata(compiled_package.path)[SPEC_KEY])
    for item in document["inputs"] + document["outputs"]:
        item.pop("name", None)  # as packages from before names were recorded
    unnamed = edit_spec(compiled_package.path, tmp_path / "unnamed.pt2", inputs=document["inputs"],
                        outputs=document["outputs"])
    torch.save({"x": compiled_package.inputs[0]}, tmp_path / "named.pt")
    for runtime, ran in run_both(build, unnamed, tmp_path, "--inputs", tmp_path / "named.pt").items():
        assert ran.code == 2, (runtime, ran.text)
        assert 'holds tensors by name ("x"), but the package records no input names' in ran.text, (runtime, ran.text)


def test_a_short_record_in_a_dict_is_refused_by_both(named_demo: Path, compiled_package: CompiledPackage,
                                                      build: Build, tmp_path: Path) -> None:
    """The hostile-file guarantee holds for dicts: a storage record shorter than its
    pickle declares is refused before any tensor is read."""
    torch.save({"pixels": compiled_package.inputs[0]}, tmp_path / "good.pt")
    crafted = rewrite_zip(tmp_path / "good.pt", tmp_path / "crafted.pt",
                          lambda name, data: data[:-3] if name.endswith("/data/0") else data)
    results = run_both(build, named_demo, tmp_path, "--inputs", crafted)
    assert results["cpp"].code == 2 and "tensor 'pixels' declares a storage of" in results["cpp"].text, results
    assert results["python"].code == 2 and "does not match" in results["python"].text, results
    assert not results["cpp"].outputs.exists() and not results["python"].outputs.exists()


def test_a_dict_runs_the_named_identity_bit_for_bit(named_demo: Path, compiled_package: CompiledPackage,
                                                    build: Build, tmp_path: Path) -> None:
    torch.save({"pixels": compiled_package.inputs[0]}, tmp_path / "in.pt")
    for runtime, ran in run_both(build, named_demo, tmp_path, "--inputs", tmp_path / "in.pt").items():
        assert ran.code == 0, (runtime, ran.text)
        assert "verify: output[0] vs input[0] (bitwise): identical" in ran.text, (runtime, ran.text)
