"""The package contract, pinned across runtimes: every vector in tests/contract/ runs
through the Python modules here and through the C++ runner core (the
contract_vectors binary, no Python in its process), and both must reach the
vector's expected verdict. Wording may differ between the sides; verdicts may not."""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

from aoti_deploy.errors import AotiDeployError, InputError
from aoti_deploy.package.dtypes import NAMES, dtype_name
from aoti_deploy.package.spec import OpRef, PackageSpec, SpecError, parse_document
from aoti_deploy.runtime.preflight import HostFacts, check_required_symbols, check_runs_here
from aoti_deploy.runtime.random_inputs import make_random_inputs, random_input_shapes
from aoti_deploy.runtime.validation import InputDesc, check_inputs
from aoti_deploy.verify.tolerance import Tolerance, compare, list_verdict, verdict_line

CONTRACT = Path(__file__).parent / "contract"
SUITES = {
    "spec": "spec_vectors.json",
    "preflight": "preflight_vectors.json",
    "validation": "validation_vectors.json",
    "random": "random_vectors.json",
    "comparison": "comparison_vectors.json",
    "dtypes": "dtypes.json",
    # torch.testing's default rtol/atol for each dtype of the table: the oracle is
    # torch.testing itself, so the C++ table cannot drift from it.
    "tolerances": "dtypes.json",
    # Signature files read without crypto, and the signed file set against files on disk.
    "signatures": "signature_vectors.json",
    # The Triton batch-dim rule: what triton_repository batches, the aoti backend accepts.
    "batching": "batching_vectors.json",
    # Which dtypes a served tensor may have, and their Triton data types (writer, backend).
    "triton_types": "dtypes.json",
    # Untrusted archives and JSON: the zip entry-name rule, and the nesting limit.
    "archive_names": "archive_name_vectors.json",
    "json_depth": "json_depth_vectors.json",
    # The command line's rules: the --input-shape text, and which checks run under which rule.
    "input_shape": "input_shape_vectors.json",
    "check_plan": "check_plan_vectors.json",
    # How the verify lines name each output: by the model's names, or by index.
    "labels": "label_vectors.json",
    # The CPU budget: the C++ side reads the cgroup tree, the Python side sizes pods by its threads.
    "cpu_budget": "cpu_budget_vectors.json",
    # Triton's tensor names and config parameters: what triton_config writes, the backend reads.
    "triton_names": "triton_name_vectors.json",
    # Private folders named by their owner: which a later runner may remove.
    "private_folders": "private_folder_vectors.json",
}
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _vectors(suite: str) -> list[dict]:
    return json.loads((CONTRACT / SUITES[suite]).read_text())["vectors"]


def _cases(runtime: str) -> list:
    """Every vector, but for Python those of a hand-written Triton config: no option of
    the Python writer makes one, and only the backend reads them."""
    return [pytest.param(suite, v, id=f"{suite}-{v['name']}") for suite in SUITES for v in _vectors(suite)
            if runtime == "cpp" or "hand_written" not in v]


@pytest.fixture(scope="session")
def cpp_verdicts(build) -> dict[str, dict]:
    """Each suite's vectors run once through the C++ contract_vectors binary."""
    binary = build.dir / "contract_vectors"
    verdicts = {}
    for suite, name in SUITES.items():
        result = subprocess.run([binary, suite, CONTRACT / name], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        verdicts[suite] = json.loads(result.stdout)
    return verdicts


def _spec(vector: dict) -> PackageSpec:
    spec = parse_document(vector["spec"])
    spec.aoti = vector.get("aoti", {})
    return spec


def _metadata(vector: dict) -> dict[str, str]:
    """A spec vector's metadata entries, documents serialized as the writer does."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in vector["metadata"].items()}


def _tensor(description: dict) -> torch.Tensor:
    dtype = getattr(torch, description["dtype"])
    width = torch.empty((), dtype=dtype).element_size()
    values = [(v - (1 << 64)) if v >= (1 << 63) else v for v in (int(b, 16) for b in description["bits"])]
    raw = torch.tensor(values, dtype=torch.int64).to(_INT_OF_WIDTH[width])
    return raw.view(dtype).reshape(description["shape"])


def _bits(tensor: torch.Tensor) -> list[str]:
    """A tensor's bit patterns, as _tensor reads them."""
    width = tensor.element_size()
    values = tensor.contiguous().view(_INT_OF_WIDTH[width]).flatten().tolist()
    return [f"0x{value & ((1 << (8 * width)) - 1):0{2 * width}x}" for value in values]


def _python_verdict(suite: str, vector: dict) -> object:
    """The Python modules' verdict, in the same form as the C++ binary prints."""
    try:
        if suite == "spec":
            spec = PackageSpec.from_metadata(_metadata(vector), "vector")
            document = spec.to_document()
            document.pop("verified")  # the compile cache's record: no runtime reads it
            document["schema_version"] = spec.schema_version
            return {"ok": document}
        if suite == "preflight":
            facts = vector["host"]
            registered = {(op["name"], op["overload"]) for op in facts.get("ops", [])}
            host = HostFacts(
                torch_version=facts["torch_version"],
                machine=facts["machine"],
                cpu_flags=set(facts["cpu_flags"]),
                cuda_available=facts["cuda_available"],
                has_op=lambda op: any(
                    name == op.name and (op.overload is None or overload == op.overload) for name, overload in registered
                ),
                has_class=lambda cls: cls in facts.get("classes", []),
            )
            spec = _spec(vector)
            check_runs_here(spec, host)
            check_required_symbols(spec, host)
            return "ok"
        if suite == "validation":
            inputs = [
                InputDesc(i["dtype"], tuple(i["shape"]), i.get("device", "cpu"), i.get("layout", "strided"),
                          tuple(i["values"]) if "values" in i else None)
                for i in vector["inputs"]
            ]
            check_inputs(inputs, _spec(vector))
            return "ok"
        if suite == "random":
            spec = _spec(vector)
            asked = [tuple(shape) for shape in vector["input_shapes"]] if "input_shapes" in vector else None
            verdict: dict[str, object] = {"shapes": [list(shape) for shape in random_input_shapes(spec, asked)]}
            if "seed" in vector:
                verdict["bits"] = [_bits(t) for t in make_random_inputs(spec, vector["seed"], asked)]
            return verdict
        if suite == "comparison":
            # The rule is written as the spec's eager_check entry, as the C++ side reads it.
            tolerance = parse_document({"schema_version": 2, "inputs": [], "eager_check": vector["tolerance"]}).eager_check
            comparisons = [compare(_tensor(a), _tensor(e), tolerance) for a, e in zip(vector["actual"], vector["expected"])]
            return {
                "verdict": list_verdict(comparisons),
                "verdict_line": verdict_line(comparisons),
                "details": [f"{c.rule}: {c}" for c in comparisons],
            }
        if suite == "tolerances":
            rtol, atol = Tolerance("close").resolve(getattr(torch, vector["name"]))
            return {"rtol": rtol, "atol": atol}
        if suite == "signatures":
            return _signature_verdict(vector)
        if suite == "triton_types":
            from aoti_deploy.package.dtypes import TRITON_TYPES
            from aoti_deploy.serve.triton_client import _datatype
            from aoti_deploy.serve.triton_config import DATATYPES

            # The writer's and the client's types are the table's, not tables of their own.
            assert DATATYPES is TRITON_TYPES
            name = vector["name"]
            try:
                sent = _datatype(torch.empty(0, dtype=getattr(torch, name)))
            except AotiDeployError:
                sent = None
            assert sent == TRITON_TYPES.get(name)
            return TRITON_TYPES.get(name)
        if suite == "batching":
            from aoti_deploy.serve.triton_config import MAX_BATCH_SIZE_LIMIT, TensorNames, batch_dim, triton_config

            spec = parse_document(vector["spec"])
            dim, _ = batch_dim(spec)
            if dim is None and any(t.is_scalar for t in spec.outputs):
                # Never batched: the full shapes, each Python scalar output [1] (no reshape).
                config = triton_config(spec, "m")
                scalars = [k for k, t in enumerate(spec.outputs) if t.is_scalar]
                assert all(config.outputs[k].dims == (1,) and config.outputs[k].reshape is None for k in scalars)
                assert all(t.reshape is None for t in config.inputs + config.outputs)
                assert TensorNames.of_spec(spec).scalar_outputs == tuple(scalars)
                return {"max_batch_size": config.max_batch_size, "scalar_outputs": scalars}
            if dim is None:
                return "not_batched"
            verdict: dict = {"max_batch_size": MAX_BATCH_SIZE_LIMIT if dim.max is None else min(dim.max,
                                                                                                 MAX_BATCH_SIZE_LIMIT)}
            # Which tensors requests carry as [batch, 1]: the client's view, which must be the
            # config text's (a spec without outputs has no config).
            names = TensorNames.of_spec(spec)
            if spec.outputs:
                config = triton_config(spec, "m")
                assert names.reshaped_inputs == tuple(i for i, t in enumerate(config.inputs) if t.reshape == ())
                assert names.reshaped_outputs == tuple(k for k, t in enumerate(config.outputs) if t.reshape == ())
                assert all(t.dims == (1,) for t in config.inputs + config.outputs if t.reshape is not None)
            if names.reshaped_inputs or names.reshaped_outputs:
                verdict["reshaped"] = {"inputs": list(names.reshaped_inputs), "outputs": list(names.reshaped_outputs)}
            return verdict
        if suite == "archive_names":
            from aoti_deploy.package.zip_check import entry_name_problem

            return entry_name_problem(vector["entry"])
        if suite == "private_folders":
            from aoti_deploy.package.private_folder import folder_owner, owner_is_gone

            owner = folder_owner(vector["folder"])
            if owner is None:
                return "refused"
            return "gone" if owner_is_gone(owner, vector["processes"].get(str(owner.pid))) else "kept"
        if suite == "json_depth":
            from aoti_deploy.package.json_text import JsonTextError, parse_json_limited

            try:
                parse_json_limited(vector["text"])
            except JsonTextError as error:
                return "too_deep" if "levels deep" in str(error) else "not_json"
            return "ok"
        if suite == "input_shape":
            from aoti_deploy.runtime.input_shape import parse_shape

            try:
                return {"shape": list(parse_shape(vector["text"]))}
            except InputError as error:
                return {"message": str(error)}
        if suite == "check_plan":
            return _check_plan_verdict(vector)
        if suite == "labels":
            from aoti_deploy.verify.tolerance import compared_labels

            return compared_labels(parse_document(vector["spec"]), vector["reference"], vector["count"])
        if suite == "cpu_budget":
            from aoti_deploy.serve.kubernetes import cpu_budget, default_intra_op_threads

            cpus, instances = vector["expect"]["cpus"], vector["server_instances"]
            threads = default_intra_op_threads(cpus, instances)
            assert cpu_budget(instances, cpu_limit=cpus).intra_op_threads == threads
            return {"intra_op_threads": threads}
        if suite == "triton_names":
            return _triton_names_verdict(vector)
        if suite == "dtypes":
            name = vector["name"]
            if name not in NAMES:
                return {"error": "unknown"}
            return {"name": dtype_name(getattr(torch, name))}
    except AotiDeployError as error:
        assert error.kind, f"an error without a kind: {error}"
        return {"error": error.kind}
    raise AssertionError(f"unknown suite {suite}")


def _check_plan_verdict(vector: dict) -> list[dict]:
    """The checks plan_checks makes for the vector's references, rule and options."""
    from aoti_deploy.verify.tolerance import plan_checks, tolerance_from_options

    recorded = vector["recorded"]
    if recorded is not None:
        recorded = parse_document({"schema_version": 2, "inputs": [], "eager_check": recorded}).eager_check
    checks = plan_checks(
        expected=[] if "expected" in vector["given"] else None, eager=[] if "eager" in vector["given"] else None,
        inputs=[], is_identity=vector["is_identity"], recorded=recorded,
        override=tolerance_from_options(**vector["options"], default=None),
    )
    return [{"check": c.name, "references": c.reference_name, "rule": c.tolerance.to_document()} for c in checks]


def _triton_names_verdict(vector: dict) -> object:
    """A spec's served names, or the parameters the writer puts in config.pbtxt."""
    from aoti_deploy.serve.triton_config import INPUT_PREFIX, OUTPUT_PREFIX, served_name, triton_config

    if "spec" in vector:
        spec = parse_document(vector["spec"])
        outputs = vector.get("outputs_returned", len(spec.outputs))
        return {"inputs": [served_name(spec.inputs, i, INPUT_PREFIX) for i in range(len(spec.inputs))],
                "outputs": [served_name(spec.outputs, k, OUTPUT_PREFIX) for k in range(outputs)]}
    spec = parse_document({"schema_version": 2, "inputs": [{"dtype": "float32", "dims": [{"min": 2, "max": 2}]}],
                           "outputs": [{"dtype": "float32", "dims": [{"min": 2, "max": 2}]}]})
    try:
        return dict(triton_config(spec, "model", **vector["options"]).parameters)
    except AotiDeployError:
        return {"error": "refused"}


def _signature_verdict(vector: dict) -> object:
    from aoti_deploy.package.signature_file import check_signed_files, read_signature

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.sig"
        path.write_text(vector["text"] if "text" in vector else json.dumps(vector["document"]), encoding="utf-8")
        manifest = read_signature(path)
    if "on_disk" in vector:
        check_signed_files(manifest, vector["on_disk"], "bundle")
    return {"ok": {"key_hint": manifest.key_hint, "files": [[f.name, f.sha256] for f in manifest.files]}}


def _expected(suite: str, vector: dict, runtime: str) -> object:
    if suite == "tolerances":
        from torch.testing._comparison import default_tolerances

        rtol, atol = default_tolerances(getattr(torch, vector["name"]))
        return {"rtol": rtol, "atol": atol}
    if suite == "triton_types":
        return vector["triton"]
    if suite == "cpu_budget" and runtime == "python":
        return {"intra_op_threads": vector["expect"]["intra_op_threads"]}
    if suite == "triton_names" and runtime == "python" and "parameters" in vector and "error" not in vector["expect"]:
        return vector["parameters"]  # what the writer writes, which the backend reads as "expect"
    if suite == "dtypes":
        return {"name": vector["name"]} if runtime == "python" else {"name": vector["name"], "scalar_type": vector["scalar_type"]}
    expect = vector["expect"]
    if suite in ("preflight", "validation"):
        kind = expect[runtime] if isinstance(expect, dict) else expect
        return kind if kind == "ok" else {"error": kind}
    return expect


def _comparable(verdict: object) -> object:
    """A C++ error verdict carries its message too; the kind is what must agree."""
    if isinstance(verdict, dict) and "error" in verdict:
        return {"error": verdict["error"]}
    return verdict


@pytest.mark.parametrize(("suite", "vector"), _cases("python"))
def test_python_reaches_the_vector_verdict(suite, vector):
    assert _python_verdict(suite, vector) == _expected(suite, vector, "python")


@pytest.mark.parametrize(("suite", "vector"), _cases("cpp"))
def test_cpp_reaches_the_vector_verdict(suite, vector, cpp_verdicts):
    verdict = cpp_verdicts[suite][vector["name"]]
    assert _comparable(verdict) == _expected(suite, vector, "cpp"), verdict


def test_both_dtype_tables_are_the_vector_table(cpp_verdicts):
    table = [v["name"] for v in _vectors("dtypes")]
    assert list(NAMES) == table
    assert cpp_verdicts["dtypes"]["__table__"] == table


def test_a_malformed_output_gets_the_same_message_as_an_input_in_both(cpp_verdicts):
    """Outputs are read by the inputs' own checks on each side, so a bad one gets the
    inputs' message, naming outputs[i] where an input's names inputs[i]."""
    cases = [v for v in _vectors("spec") if v["name"].startswith("outputs_") and "error" in v["expect"]]
    assert len(cases) >= 4
    for vector in cases:
        with pytest.raises(SpecError) as error:
            PackageSpec.from_metadata(_metadata(vector), "vector")
        assert "malformed: outputs" in str(error.value), error.value
        assert cpp_verdicts["spec"][vector["name"]]["message"] == str(error.value), vector["name"]
    as_input = {"schema_version": 2, "inputs": [{"dtype": "float99", "dims": []}]}
    as_output = {"schema_version": 2, "inputs": [], "outputs": [{"dtype": "float99", "dims": []}]}
    with pytest.raises(SpecError) as input_error:
        parse_document(as_input)
    with pytest.raises(SpecError) as output_error:
        parse_document(as_output)
    assert str(output_error.value) == str(input_error.value).replace("inputs[0]", "outputs[0]")


def test_a_malformed_name_gets_the_same_message_in_both(cpp_verdicts):
    """Tensor names are read by one rule on each side: a bad one gets one message,
    naming the entry."""
    cases = [v for v in _vectors("spec") if v["name"].startswith("name_") and "error" in v["expect"]]
    assert len(cases) >= 6
    for vector in cases:
        with pytest.raises(SpecError) as error:
            PackageSpec.from_metadata(_metadata(vector), "vector")
        assert "].name" in str(error.value) or "has no name" in str(error.value), error.value
        assert cpp_verdicts["spec"][vector["name"]]["message"] == str(error.value), vector["name"]


@pytest.mark.parametrize("prefix", ["quantization_", "output_kind_"])
def test_a_malformed_field_gets_the_vector_message_in_both(prefix, cpp_verdicts):
    """The quantization record and an output's kind (a tensor, or the Python int, float
    or bool the model returns) are each checked by one rule on each side: a bad one
    gets the message its vector gives, word for word, in both."""
    cases = [v for v in _vectors("spec") if v["name"].startswith(prefix) and "error" in v["expect"]]
    assert len(cases) >= 7
    for vector in cases:
        with pytest.raises(SpecError) as error:
            PackageSpec.from_metadata(_metadata(vector), "vector")
        assert str(error.value) == vector["message"], vector["name"]
        assert cpp_verdicts["spec"][vector["name"]]["message"] == vector["message"], vector["name"]


def test_a_bad_value_gets_the_vector_line_in_both(cpp_verdicts):
    """An out-of-range index value is refused with one line, the same in both runtimes."""
    cases = [v for v in _vectors("validation") if "message" in v]
    assert len(cases) >= 5
    for vector in cases:
        with pytest.raises(AotiDeployError) as error:
            _python_verdict_raising(vector)
        assert str(error.value) == vector["message"], vector["name"]
        assert cpp_verdicts["validation"][vector["name"]]["message"] == vector["message"], vector["name"]


def _python_verdict_raising(vector: dict) -> None:
    inputs = [InputDesc(i["dtype"], tuple(i["shape"]), values=tuple(i.get("values", ()))) for i in vector["inputs"]]
    check_inputs(inputs, _spec(vector))


def _is_value_case(vector: dict) -> bool:
    """A validation vector about element values (its inputs carry them)."""
    return any("values" in item for item in vector["inputs"])


def test_a_tensor_check_finds_the_value_the_vector_names():
    """check_values on real tensors (what the runtimes call) reaches the vectors' line."""
    from aoti_deploy.runtime.validation import check_values

    for vector in [v for v in _vectors("validation") if "message" in v and _is_value_case(v)]:
        spec = _spec(vector)
        tensors = [
            torch.tensor(i.get("values", [0] * math.prod(i["shape"])), dtype=getattr(torch, i["dtype"])).reshape(i["shape"])
            for i in vector["inputs"]
        ]
        with pytest.raises(AotiDeployError) as error:
            check_values(tensors, spec)
        assert str(error.value) == vector["message"], vector["name"]


def _assert_cpp_reads_it_as_written(build, tmp_path, spec):
    """The C++ reader (contract_vectors spec) reads the document the Python writer
    wrote for ``spec`` (to_metadata) as the Python side's own document of it."""
    vectors = tmp_path / "written.json"
    vectors.write_text(json.dumps({"vectors": [{"name": "written", "metadata": spec.to_metadata()}]}))
    result = subprocess.run([build.dir / "contract_vectors", "spec", vectors], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    document = spec.to_document()
    document.pop("verified")
    assert json.loads(result.stdout)["written"] == {"ok": document}


def test_python_written_document_parses_the_same_in_cpp(build, tmp_path):
    """A document written by the Python writer (to_metadata) reads back alike in both."""
    from aoti_deploy.package.spec import DimSpec, TensorSpec

    spec = PackageSpec(
        inputs=[TensorSpec((DimSpec(1, 8), DimSpec(3, 3)), "float32"), TensorSpec((), "float64")],
        outputs=[TensorSpec((DimSpec(1, 8),), "float32"), TensorSpec((DimSpec(2, 16), DimSpec(3, 3)), "int64")],
        required_ops=[OpRef("my_ops::identity_conv_op"), OpRef("extra_ops::scale", "Tensor")],
        example_shapes=[(2, 3), ()],
        torch_version="2.13.0",
    )
    _assert_cpp_reads_it_as_written(build, tmp_path, spec)


def test_scalar_outputs_are_written_with_their_kind_and_read_alike_in_cpp(build, tmp_path):
    """A Python int, float or bool output is written as a 0-d entry with its kind (and a
    tensor output without one, as ever); the C++ side reads the same document, and
    both describe it alike (inspect's rows)."""
    from aoti_deploy.package.spec import DimSpec, TensorSpec

    spec = PackageSpec(
        inputs=[TensorSpec((DimSpec(1, 8), DimSpec(3, 3)), "float32", name="x")],
        outputs=[TensorSpec((DimSpec(1, 8), DimSpec(3, 3)), "float32", name="y"),
                 TensorSpec((), "int64", name="count", kind="int"), TensorSpec((), "float64", name="mean", kind="float"),
                 TensorSpec((), "bool", name="any", kind="bool")],
        outputs_by_name=True, example_shapes=[(2, 3)],
    )
    written = json.loads(spec.to_metadata()["aoti_deploy.spec"])
    assert written["schema_version"] == 2
    assert [item.get("kind") for item in written["outputs"]] == [None, "int", "float", "bool"]
    assert written["outputs"][1] == {"dtype": "int64", "dims": [], "name": "count", "kind": "int"}
    assert parse_document(written).outputs == spec.outputs
    _assert_cpp_reads_it_as_written(build, tmp_path, spec)
    assert dict(spec.describe())["output[1]"] == "count  int (a 0-d int64 tensor)"


def test_an_unbounded_dim_is_written_as_null_in_schema_3_and_reads_alike_in_cpp(build, tmp_path):
    """An unbounded dim is "max": null, which needs schema 3; a spec with none keeps
    schema 2, so older readers still read it. The C++ side reads the same document."""
    from aoti_deploy.package.spec import DimSpec, TensorSpec

    bounded = PackageSpec(inputs=[TensorSpec((DimSpec(1, 8), DimSpec(3, 3)), "float32")])
    assert bounded.to_document()["schema_version"] == 2
    spec = PackageSpec(
        inputs=[TensorSpec((DimSpec(1, None), DimSpec(3, 3)), "float32")],
        outputs=[TensorSpec((DimSpec(2, None), DimSpec(3, 3)), "float32")],
        example_shapes=[(4, 3)],
    )
    written = json.loads(spec.to_metadata()["aoti_deploy.spec"])
    assert written["schema_version"] == 3
    assert written["inputs"][0]["dims"] == [{"min": 1, "max": None}, {"min": 3, "max": 3}]
    assert written["outputs"][0]["dims"][0] == {"min": 2, "max": None}
    _assert_cpp_reads_it_as_written(build, tmp_path, spec)
    assert PackageSpec.from_metadata(spec.to_metadata()).inputs == spec.inputs


def test_validation_messages_given_by_a_vector_are_the_same_in_both(cpp_verdicts):
    """Where a validation vector gives the message (e.g. "expected a size >= 1" for an
    unbounded dim), both sides print exactly it."""
    cases = [v for v in _vectors("validation") if "message" in v]
    assert len(cases) >= 3
    for vector in cases:
        if _is_value_case(vector):  # the value check runs on tensors: the test above
            assert cpp_verdicts["validation"][vector["name"]]["message"] == vector["message"], vector["name"]
            continue
        inputs = [InputDesc(i["dtype"], tuple(i["shape"])) for i in vector["inputs"]]
        with pytest.raises(AotiDeployError) as error:
            check_inputs(inputs, _spec(vector))
        assert str(error.value) == vector["message"], vector["name"]
        assert cpp_verdicts["validation"][vector["name"]]["message"] == vector["message"], vector["name"]


def test_a_package_from_before_the_spec_document_still_runs_in_both(compiled_package, build, op_library, tmp_path):
    """Legacy aoti_deploy.* entries (no document) load through each side's converter,
    and the package still verifies bit for bit in both runtimes."""
    from conftest import legacy_package, run_cpp_runtime, run_python_runtime

    from aoti_deploy.package.archive import read_package_metadata

    package = legacy_package(compiled_package.path, tmp_path / "legacy.pt2")
    assert "aoti_deploy.spec" not in read_package_metadata(package)
    py_code, py_out = run_python_runtime(package, op_library, compiled_package.input_file, tmp_path / "py.pt")
    cpp_code, cpp_out = run_cpp_runtime(build.runner, package, op_library, compiled_package.input_file, tmp_path / "cpp.pt")
    assert py_code == 0 and "PASSED" in py_out, py_out
    assert cpp_code == 0 and "PASSED" in cpp_out, cpp_out
    inspect = subprocess.run([build.runner, package, "--inspect"], capture_output=True, text=True)
    assert "spec: schema 1 (legacy entries)" in inspect.stdout, inspect.stdout


def test_inspect_shows_the_tuning_and_quantization_rows_as_python_describes_them(compiled_package, build, tmp_path):
    """aoti_runner --inspect prints PackageSpec.describe()'s rows, in its order and
    words: the tuning rows, then the quantization row (numbers as Python formats them:
    812.5 µs rounds to even, max_abs keeps 3 significant digits, top-1 one decimal)."""
    from conftest import edit_spec

    from aoti_deploy.package.archive import read_package_spec

    vectors = {v["name"]: v["metadata"].get("aoti_deploy.spec") for v in _vectors("spec")}
    tuning = [("tuning: toolkit defaults (freezing)", "p50 812 µs; verified; chosen, the fastest"),
              ("tuning: Inductor's defaults", "not timed; not tried")]
    shown = {
        "quantization_int8_recorded":
            "int8 (static, 8 calibration call(s)): 20 of 20 quantized convolution(s) and 1 of 2 linear(s) run oneDNN "
            "int8 kernels (1 small linear(s) in Inductor's own kernels, from the int8 weights); against the fp32 "
            "model: max abs 0.0123, top-1 agreement 87.5 %",
        "quantization_int8_dynamic_recorded":
            "int8-dynamic (dynamic, 0 calibration call(s)): 0 of 0 quantized convolution(s) and 3 of 3 linear(s) run "
            "oneDNN int8 kernels; against the fp32 model: max abs 2",
        None: None,  # tuned, not quantized
    }
    for name, row in shown.items():
        package = edit_spec(compiled_package.path, tmp_path / f"{name or 'tuned'}.pt2",
                            tuning=vectors["tuning_recorded"]["tuning"], quantization=name and vectors[name]["quantization"])
        rows = read_package_spec(package).describe()
        expected = tuning + ([("quantization", row)] if row else [])
        assert rows[-len(expected):] == expected, rows
        cpp = subprocess.run([build.runner, package, "--inspect"], capture_output=True, encoding="utf-8", timeout=120)
        assert cpp.returncode == 0, cpp.stderr
        assert cpp.stdout.splitlines() == [f"package: {package}"] + [f"{key}: {value}" for key, value in rows]
