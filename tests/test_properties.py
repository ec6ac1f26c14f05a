"""Property tests (hypothesis): the CLI's shape and range parsing, tolerance verdicts,
and the package spec. Spec documents and comparisons are generated, well formed and
not, and run through the Python modules and through the C++ runner core (the
contract_vectors binary, as tests/test_contract.py runs the hand-written vectors):
both runtimes must reach the same verdict on every one. Each property is bounded
(max_examples, no deadline for the ones that start the binary) so the file runs in
well under a minute."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aoti_deploy.cli.parsing import parse_dynamic_dim, parse_input_values, parse_shape  # noqa: E402
from aoti_deploy.errors import InputError  # noqa: E402
from aoti_deploy.package.dtypes import NAMES  # noqa: E402
from aoti_deploy.verify.tolerance import BITWISE, CLOSE, ULP, Tolerance, compare, list_verdict  # noqa: E402

from test_contract import _bits, _comparable, _python_verdict  # noqa: E402

INT64_MAX = 2**63 - 1
FAST = settings(max_examples=100, deadline=None)
# Each example starts the C++ binary once, with a batch of vectors.
CROSS_RUNTIME = settings(
    max_examples=6, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


# --- shapes and dynamic ranges (cli/parsing.py) ---------------------------------

sizes = st.integers(min_value=0, max_value=INT64_MAX)


@FAST
@given(st.lists(sizes, max_size=6), st.sampled_from([",", ", ", " ,"]))
def test_a_written_shape_parses_back(shape, separator):
    assert parse_shape(separator.join(str(s) for s in shape)) == tuple(shape)


positions = st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=4)


@FAST
@given(positions, st.integers(1, INT64_MAX - 1), st.data())
def test_a_written_dynamic_dim_parses_back(where, low, data):
    high = data.draw(st.one_of(st.none(), st.integers(low + 1, INT64_MAX)))
    text = ",".join(f"{i}.{d}" for i, d in where) + f"={low}:" + ("" if high is None else str(high))
    dim = parse_dynamic_dim(text)
    assert (dim.positions, dim.min, dim.max) == (tuple(where), low, high)


@FAST
@given(positions, st.integers(-5, 50), st.one_of(st.none(), st.integers(-5, 50)))
def test_a_dynamic_dim_holds_two_sizes_or_more_from_one_up(where, low, high):
    text = ",".join(f"{i}.{d}" for i, d in where) + f"={low}:" + ("" if high is None else str(high))
    if low >= 1 and (high is None or high > low):
        assert (parse_dynamic_dim(text).min, parse_dynamic_dim(text).max) == (low, high)
    else:
        with pytest.raises(InputError, match="--dynamic-dim"):
            parse_dynamic_dim(text)


# Each option's parser, the characters its text is drawn from, and what a parsed value
# always holds.
OPTION_TEXTS = {
    "--input-shape": (parse_shape, st.text(alphabet="0123456789-, x.+_e", max_size=16),
                      lambda shape: all(isinstance(s, int) and s >= 0 for s in shape)),
    "--dynamic-dim": (parse_dynamic_dim, st.text(alphabet="0123456789.,=:- ", max_size=20),
                      lambda dim: dim.min >= 1 and (dim.max is None or dim.max > dim.min) and dim.positions),
}


@pytest.mark.parametrize("option", list(OPTION_TEXTS))
@FAST
@given(data=st.data())
def test_any_option_text_parses_or_is_refused_with_an_input_error(option, data):
    parse, texts, holds = OPTION_TEXTS[option]
    text = data.draw(texts, label="text")
    try:
        value = parse(text)
    except InputError as error:
        assert option in str(error)
    else:
        assert holds(value), value


@FAST
@given(st.dictionaries(st.integers(0, 9), st.tuples(st.integers(-(2**63), INT64_MAX), st.integers(-(2**63), INT64_MAX)),
                       max_size=4))
def test_input_value_ranges_parse_back_or_are_refused_when_empty(ranges):
    texts = [f"{i}={low}:{high}" for i, (low, high) in ranges.items()]
    if all(low <= high for low, high in ranges.values()):
        assert parse_input_values(texts) == ranges
    else:
        with pytest.raises(InputError, match="empty"):
            parse_input_values(texts)


# --- tolerance verdicts (verify/tolerance.py) -----------------------------------

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@st.composite
def tensor_pairs(draw, dtypes=tuple(FLOAT_DTYPES)):
    """Two tensors of one dtype and shape: the expected one's bits drawn freely (NaN,
    ±inf, -0.0 and subnormals included), the actual one a copy with some elements
    moved by a few ULP or replaced by other bits."""
    dtype = draw(st.sampled_from(dtypes))
    width = torch.empty((), dtype=dtype).element_size()
    int_dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
    n = draw(st.integers(1, 6))
    limit = 2 ** (8 * width - 1)
    raw = draw(st.lists(st.integers(-limit, limit - 1), min_size=n, max_size=n))
    expected = torch.tensor(raw, dtype=torch.int64).to(int_dtype).view(dtype)
    actual_raw = list(raw)
    for k in range(n):
        change = draw(st.sampled_from(["same", "same", "nudge", "other"]))
        if change == "nudge":
            actual_raw[k] = max(-limit, min(limit - 1, raw[k] + draw(st.integers(-3, 3))))
        elif change == "other":
            actual_raw[k] = draw(st.integers(-limit, limit - 1))
    actual = torch.tensor(actual_raw, dtype=torch.int64).to(int_dtype).view(dtype)
    return actual, expected


@FAST
@given(tensor_pairs(), st.sampled_from([Tolerance(BITWISE), Tolerance(ULP, max_ulp=1), Tolerance(CLOSE)]))
def test_a_tensor_passes_against_its_own_bits_under_every_rule(pair, tolerance):
    _, expected = pair
    comparison = compare(expected.clone(), expected, tolerance)
    assert comparison.passed and list_verdict([comparison]) == "passed"


@FAST
@given(tensor_pairs())
def test_bitwise_passes_exactly_when_the_bits_are_equal(pair):
    actual, expected = pair
    same_bits = _bits(actual) == _bits(expected)
    assert compare(actual, expected, Tolerance(BITWISE)).passed == same_bits


@FAST
@given(tensor_pairs(), st.integers(1, 8))
def test_more_ulp_never_fails_what_fewer_passed(pair, max_ulp):
    actual, expected = pair
    if compare(actual, expected, Tolerance(ULP, max_ulp=max_ulp)).passed:
        assert compare(actual, expected, Tolerance(ULP, max_ulp=max_ulp + 1)).passed


@FAST
@given(tensor_pairs(), st.floats(0, 1), st.floats(0, 1), st.floats(1, 10))
def test_a_wider_tolerance_never_fails_what_a_narrower_one_passed(pair, rtol, atol, factor):
    actual, expected = pair
    narrow = compare(actual, expected, Tolerance(CLOSE, rtol=rtol, atol=atol))
    wide = compare(actual, expected, Tolerance(CLOSE, rtol=rtol * factor, atol=atol * factor))
    if narrow.passed:
        assert wide.passed
    assert wide.num_outside <= narrow.num_outside


@FAST
@given(tensor_pairs())
def test_a_nan_against_a_number_fails_every_rule_but_a_nan_against_nan_passes_close(pair):
    actual, expected = pair
    a, e = actual.double(), expected.double()
    for tolerance in (Tolerance(BITWISE), Tolerance(ULP, max_ulp=1000), Tolerance(CLOSE, rtol=1.0, atol=1.0)):
        comparison = compare(actual, expected, tolerance)
        if bool((a.isnan() != e.isnan()).any()):
            assert not comparison.passed
    if bool((a.isnan() == e.isnan()).all()) and bool((a[~a.isnan()] == e[~e.isnan()]).all()):
        assert compare(actual, expected, Tolerance(CLOSE)).passed


# --- both runtimes, on generated vectors ----------------------------------------

def _cpp_verdicts(build, suite: str, vectors: list[dict]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{suite}.json"
        path.write_text(json.dumps({"vectors": vectors}))
        result = subprocess.run([build.dir / "contract_vectors", suite, path], capture_output=True, text=True,
                                timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _assert_same_verdicts(build, suite: str, vectors: list[dict]) -> None:
    cpp = _cpp_verdicts(build, suite, vectors)
    for vector in vectors:
        python = _python_verdict(suite, vector)
        assert _comparable(cpp[vector["name"]]) == python, (json.dumps(vector), cpp[vector["name"]])


def _tensor_json(tensor: torch.Tensor) -> dict:
    return {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape), "bits": _bits(tensor)}


@st.composite
def comparison_vectors(draw) -> dict:
    actual, expected = draw(tensor_pairs())
    rule = draw(st.sampled_from(["bitwise", "ulp", "close", "close_default"]))
    if rule == "bitwise":
        tolerance: dict = {"rule": "bitwise"}
    elif rule == "ulp":
        tolerance = {"rule": "ulp", "max_ulp": draw(st.integers(1, 5))}
    elif rule == "close":
        tolerance = {"rule": "close", "rtol": draw(st.sampled_from([0.0, 1e-5, 1e-3, 0.5])),
                     "atol": draw(st.sampled_from([0.0, 1e-8, 1e-5, 1.0]))}
    else:
        tolerance = {"rule": "close"}
    return {"tolerance": tolerance, "actual": [_tensor_json(actual)], "expected": [_tensor_json(expected)]}


@CROSS_RUNTIME
@given(st.lists(comparison_vectors(), min_size=10, max_size=30))
def test_generated_comparisons_get_one_verdict_word_for_word_in_both_runtimes(build, vectors):
    named = [{"name": f"generated_{i}", **vector} for i, vector in enumerate(vectors)]
    _assert_same_verdicts(build, "comparison", named)


# Documents are drawn well formed, then now and then changed in one or two places: a
# value replaced by one of another type or range, or a key removed.
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(2**63 - 2, 2**64 + 1),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4))
INTEGER_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-(2**15), 2**15 - 1),
                  "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@st.composite
def dim_specs(draw, version: int) -> dict:
    low = draw(st.integers(0, 16))
    if version >= 3 and draw(st.integers(0, 4)) == 0:
        return {"min": low, "max": None}
    return {"min": low, "max": draw(st.one_of(st.just(low), st.integers(low, 64), st.just(INT64_MAX)))}


@st.composite
def tensor_specs(draw, version: int) -> dict:
    dtype = draw(st.sampled_from(list(NAMES)))
    tensor = {"dtype": dtype, "dims": draw(st.lists(dim_specs(version), max_size=4))}
    if dtype in INTEGER_RANGES and draw(st.booleans()):
        low_limit, high_limit = INTEGER_RANGES[dtype]
        low = draw(st.integers(low_limit, high_limit))
        tensor["values"] = {"min": low, "max": draw(st.integers(low, high_limit)), "why": draw(st.text(max_size=6))}
    return tensor


@st.composite
def well_formed_specs(draw) -> dict:
    version = draw(st.sampled_from([2, 3]))
    inputs = draw(st.lists(tensor_specs(version), max_size=3))
    document: dict = {"schema_version": version, "inputs": inputs}
    qualified = st.sampled_from(["my_ops::identity_conv_op", "extra_ops::scale", "aten::add", "a::b::c"])
    document.update(draw(st.fixed_dictionaries({}, optional={
        "outputs": st.lists(tensor_specs(version), max_size=2),
        "device": st.sampled_from(["cpu", "cuda", "cuda:0", "mps"]),
        "required_ops": st.lists(st.fixed_dictionaries(
            {"name": qualified}, optional={"overload": st.sampled_from(["default", "Tensor"])}), max_size=3),
        "required_classes": st.lists(qualified, max_size=2),
        "op_libraries": st.lists(st.text(max_size=6), max_size=2),
        "op_library_namespaces": st.dictionaries(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=2),
                                                 max_size=2),
        "is_identity": st.booleans(),
        "torch_version": st.sampled_from(["2.13.0", "2.13.0+cpu", "2.14.1"]),
        "cpu_flags": st.lists(st.sampled_from(["avx2", "sse4_2", "avx512f"]), max_size=3),
        "cpu_target": st.sampled_from(["", "native", "x86-64-v3"]),
        "python_only_ops": st.lists(qualified, max_size=2),
        "fake_modules": st.lists(st.text(max_size=6), max_size=2),
        "optimizations": st.text(max_size=6), "cache_key": st.text(max_size=6), "onnx_mode": st.text(max_size=6),
        "eager_check": st.one_of(
            st.none(), st.just({"rule": "bitwise"}), st.builds(lambda n: {"rule": "ulp", "max_ulp": n}, st.integers(1, 9)),
            st.builds(lambda r, a: {"rule": "close", "rtol": r, "atol": a}, st.floats(0, 1), st.floats(0, 1)),
            st.just({"rule": "close", "rtol": None, "atol": None})),
        "verified": st.lists(st.text(max_size=4), max_size=2),
        "unknown_key": json_scalars,
    })))
    if inputs and draw(st.booleans()):
        document["example_shapes"] = [[draw(st.integers(d["min"], d["max"] if d["max"] is not None else d["min"] + 4))
                                       for d in t["dims"]] for t in inputs]
    positions = [[i, d] for i, t in enumerate(inputs) for d in range(len(t["dims"]))]
    if len(positions) >= 2 and draw(st.booleans()):
        document["shared_dims"] = [draw(st.lists(st.sampled_from(positions), min_size=2, max_size=3))]
    return document


def _places(value, path=()):
    """Every (container, key) of a document, for a change in one place."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield value, key
            yield from _places(item, path + (key,))
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield value, k
            yield from _places(item, path + (k,))


@st.composite
def spec_documents(draw) -> dict:
    document = draw(well_formed_specs())
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        places = list(_places(document))
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        if isinstance(container, dict) and draw(st.integers(0, 3)) == 0:
            del container[key]
        else:
            container[key] = draw(st.one_of(json_scalars, st.integers(-(2**63) - 1, 2**64), st.lists(json_scalars,
                                                                                                    max_size=2)))
    return document


@st.composite
def spec_metadata(draw) -> dict:
    """A package's metadata entries: the spec document (written as JSON text by the
    vector loader), now and then a text that is not a document, and AOTI's own entries."""
    choice = draw(st.integers(0, 19))
    if choice == 0:
        entry: object = draw(st.sampled_from(["", "{", "[]", "null", '{"schema_version": 2, "inputs": []}x']))
    elif choice == 1:
        entry = draw(json_scalars)
    else:
        entry = draw(spec_documents())
    return {"aoti_deploy.spec": entry, "AOTI_DEVICE_KEY": "cpu"}


@CROSS_RUNTIME
@given(st.lists(spec_metadata(), min_size=10, max_size=40))
def test_generated_spec_documents_get_one_verdict_in_both_runtimes(build, metadatas):
    vectors = [{"name": f"generated_{i}", "metadata": m} for i, m in enumerate(metadatas)]
    _assert_same_verdicts(build, "spec", vectors)


@CROSS_RUNTIME
@given(st.lists(spec_documents(), min_size=10, max_size=30))
def test_a_spec_either_runtime_accepts_is_written_back_to_the_same_document(build, documents):
    """Round trip: whatever the Python parser accepts, its writer writes a document
    that both parsers read back to the same spec (and that the C++ writer agrees with)."""
    from aoti_deploy.package.spec import PackageSpec, SpecError, parse_document

    written = []
    for document in documents:
        try:
            spec = parse_document(json.loads(json.dumps(document)))
        except SpecError:
            continue
        again = PackageSpec.from_metadata(spec.to_metadata(), "round trip")
        assert again.to_document() == spec.to_document()
        written.append({"name": f"written_{len(written)}", "metadata": spec.to_metadata()})
    if written:
        _assert_same_verdicts(build, "spec", written)
