"""The aoti backend inside a real tritonserver: one server per session, on free loopback
ports, stopped by its PID, serving every model these tests need. Outputs over HTTP and
gRPC are compared bit for bit with aoti_runner's on the same bundle."""

from __future__ import annotations

import importlib.util

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from aoti_deploy.package.archive import read_package_metadata, read_package_spec
from aoti_deploy.package.spec import SPEC_KEY, tensor_label
from aoti_deploy.package.bundle_writer import write_bundle
from aoti_deploy.runtime.tensor_files import save_tensors
from aoti_deploy.verify.bits import bit_view
from aoti_deploy.verify.special_values import special_values

from conftest import (
    REPO_ROOT, Build, CompiledPackage, _export, edit_spec, require_triton_server, rewrite_metadata, run_cmd,
)
from test_hostile_files import ESCAPE_NAME as HOSTILE_ESCAPE
from test_hostile_files import PACKAGE_CASES as HOSTILE_PACKAGES
from test_hostile_files import rewrite_zip

from aoti_deploy.serve import triton_client, triton_server
from aoti_deploy.serve.triton_config import config_text
from aoti_deploy.serve.triton_repository import write_repository

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
from examples.index_models import (  # noqa: E402
    ComputedIndexModel, LookupModel, computed_index_inputs, lookup_inputs,
)

pytestmark = pytest.mark.triton

# Models that load, and what each is.
DEMO = "demo"  # the suite's identity package, [2, 3, 8, 12] float32, max_batch_size 0
DYNAMIC = "dynamic_fp32"  # identity, batch 1..8 (dynamic batching), height and width 1..64
FP16 = "static_fp16"  # identity, float16
PAIR = "affine_pair"  # two inputs, two outputs, extra_ops::affine from libextra_ops.so
NAMED = "named_pair"  # PAIR with names in its spec: inputs x, y; outputs scaled, tanh_sum
NAMED_INPUTS, NAMED_OUTPUTS = ("x", "y"), ("scaled", "tanh_sum")
SIGNED = "signed_demo"  # signed, with its trusted_key in config.pbtxt
SCORES = "scores"  # x [B, 8] and w [B] in; scores [B] (output_0) and x * w [B, 8] out: [B] through reshape
# Models that must fail to load, and words their reason must hold.
BROKEN = {
    "missing_op_library": "libidentity_conv_ops.so",
    "python_only": "Python",
    "tampered": "digest mismatch",
    "unsigned_with_key": "unsigned",
    "forced_batching": "max_batch_size 2 needs a batch dim",
    "batch_only_without_reshape": "declare it as dims: [ 1 ] with reshape: { shape: [ ] }",
}
# The digits CNN as an int8 package (tests/test_quantize.py), with the quant extra.
INT8 = "digits_int8"
HAS_QUANT = all(importlib.util.find_spec(name) is not None for name in ("torchao", "sklearn"))
SERVING = [DEMO, DYNAMIC, FP16, PAIR, SIGNED, NAMED, SCORES] + ([INT8] if HAS_QUANT else [])


@dataclass(frozen=True)
class Served:
    server: "triton_server.TritonServer"
    repository: Path
    build: Build
    keys: Path

    def bundle(self, model: str) -> Path:
        return self.repository / model / "1"


def _openssl(*args: object) -> None:
    result = run_cmd("openssl", *args)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory, build: Build, compiled_package: CompiledPackage,
           parity_matrix, score_package, request: pytest.FixtureRequest) -> Served:
    """The repository and the one tritonserver of the session."""
    require_triton_server()
    work = tmp_path_factory.mktemp("triton")
    repository = work / "repository"
    matrix_dir, _ = parity_matrix
    ops = [build.op_library]
    write_repository(compiled_package.path, repository, name=DEMO, op_libraries=ops)
    # A long queue delay: the batching test's 16 concurrent requests meet in the queue.
    write_repository(matrix_dir / "model_float32_dynamic.pt2", repository, name=DYNAMIC, op_libraries=ops,
                     max_queue_delay_us=20000)
    write_repository(matrix_dir / "model_float16_static.pt2", repository, name=FP16, op_libraries=ops)

    pair = work / "pair"
    code, output = _export([
        "--model", "examples.user_models:affine_pair_model", "--input-shape", "4,16", "--input-shape", "4,16",
        "--dynamic-dim", "0.0,1.0=1:32", "--op-lib", str(build.extra_op_library),
        "--fake-module", "examples.extra_ops_fakes", "--output", str(pair / "model.pt2"),
    ])
    assert code == 0, output
    write_repository(pair / "model.pt2", repository, name=PAIR, op_libraries=[build.extra_op_library])
    document = json.loads(read_package_metadata(pair / "model.pt2")[SPEC_KEY])
    for items, names in ((document["inputs"], NAMED_INPUTS), (document["outputs"], NAMED_OUTPUTS)):
        for item, name in zip(items, names, strict=True):
            item["name"] = name
    named = edit_spec(pair / "model.pt2", pair / "named.pt2", inputs=document["inputs"], outputs=document["outputs"])
    write_repository(named, repository, name=NAMED, op_libraries=[build.extra_op_library])
    # A long queue delay, as for DYNAMIC: concurrent requests meet in the queue.
    write_repository(score_package.path, repository, name=SCORES, max_queue_delay_us=20000)
    if HAS_QUANT:
        write_repository(request.getfixturevalue("digits_int8").path, repository, name=INT8)
    # The same package batched with its [B] output declared without the reshape: refused.
    write_repository(score_package.path, repository, name="batch_only_without_reshape")
    unreshaped = repository / "batch_only_without_reshape" / "config.pbtxt"
    text = unreshaped.read_text()
    declared = 'name: "output_0"\n    data_type: TYPE_FP32\n    dims: [ 1 ]\n'
    unreshaped.write_text(text.replace(declared + "    reshape: { shape: [ ] }\n", declared))
    assert unreshaped.read_text().count("reshape") == text.count("reshape") - 1

    keys = work / "keys"
    keys.mkdir()
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", keys / "sign.pem")
    _openssl("ec", "-in", keys / "sign.pem", "-pubout", "-out", keys / "sign.pub")
    write_repository(compiled_package.path, repository, name=SIGNED, op_libraries=ops,
                     sign_key=keys / "sign.pem", trusted_key=keys / "sign.pub")
    write_repository(compiled_package.path, repository, name="tampered", op_libraries=ops,
                     sign_key=keys / "sign.pem", trusted_key=keys / "sign.pub")
    with (repository / "tampered" / "1" / "libidentity_conv_ops.so").open("ab") as library:
        library.write(b"\0")
    # A trusted key for a bundle the writer does not sign only warns; written by hand here.
    write_repository(compiled_package.path, repository, name="unsigned_with_key", op_libraries=ops)
    (repository / "unsigned_with_key" / "config.pbtxt").write_text(config_text(
        read_package_spec(compiled_package.path), "unsigned_with_key", trusted_key=keys / "sign.pub"))
    write_repository(compiled_package.path, repository, name="missing_op_library", op_libraries=ops)
    (repository / "missing_op_library" / "1" / "libidentity_conv_ops.so").unlink()
    # A config that claims a batch dim the static package does not have.
    write_repository(compiled_package.path, repository, name="forced_batching", op_libraries=ops)
    forced = repository / "forced_batching" / "config.pbtxt"
    forced.write_text(forced.read_text().replace("max_batch_size: 0", "max_batch_size: 2").replace(
        "dims: [ 2, 3, 8, 12 ]", "dims: [ 3, 8, 12 ]"))
    # A package only Python can run: the writer refuses it, so the folder is made by hand.
    python_only = edit_spec(compiled_package.path, work / "python_only.pt2",
                            python_only_ops=["python_only_example::double"])
    write_bundle(python_only, ops, repository / "python_only" / "1")
    (repository / "python_only" / "config.pbtxt").write_text(
        config_text(read_package_spec(compiled_package.path), "python_only"))

    # Explicit model control, every model of the repository loaded at start: a test
    # loads one more later.
    server = triton_server.TritonServer().start(
        repository, backend_dir=build.dir / "backends", log_file=work / "tritonserver.log",
        model_control_explicit=True, extra_args=["--load-model=*"])
    try:
        server.wait_ready(120, models=SERVING)
        yield Served(server, repository, build, keys)
    finally:
        server.stop()
    assert not Path(f"/proc/{server.pid}").exists()


def runner_outputs(served: Served, model: str, inputs: list[torch.Tensor], tmp: Path) -> list[torch.Tensor]:
    """aoti_runner's outputs for ``inputs`` on the model's bundle (its version folder)."""
    tmp.mkdir(parents=True, exist_ok=True)
    save_tensors(tmp / "in.pt", inputs)
    result = run_cmd(served.build.runner, served.bundle(model), "--inputs", tmp / "in.pt", "--outputs", tmp / "out.pt")
    # Exit 1 is the runner's own identity check failing on a signalling NaN, which the
    # compiled multiply by 1 quiets (0x7f800001 -> 0x7fc00001); the outputs are written.
    assert result.returncode in (0, 1) and "wrote outputs" in result.stdout, result.stdout + result.stderr
    written = torch.load(tmp / "out.pt")
    # A model that returns a dict (the zoo's ModelOutputs): by name, in the package's order.
    return list(written.values()) if isinstance(written, dict) else written


def same_bits(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> bool:
    return len(actual) == len(expected) and all(
        a.dtype == e.dtype and a.shape == e.shape and torch.equal(bit_view(a), bit_view(e))
        for a, e in zip(actual, expected)
    )


# Shapes in each model's range (the matrix packages: see bench/parity.py).
SHAPES = {
    DEMO: [((2, 3, 8, 12), torch.float32)],
    SIGNED: [((2, 3, 8, 12), torch.float32)],
    DYNAMIC: [((3, 3, 5, 7), torch.float32)],
    FP16: [((2, 3, 8, 12), torch.float16)],
    PAIR: [((5, 16), torch.float32), ((5, 16), torch.float32)],
    NAMED: [((5, 16), torch.float32), ((5, 16), torch.float32)],
    SCORES: [((12, 8), torch.float32), ((12,), torch.float32)],  # 12: room for the special values
    INT8: [((60, 1, 8, 8), torch.float32)],
}


def model_inputs(model: str, kind: str, seed: int = 0) -> list[torch.Tensor]:
    tensors = []
    for i, (shape, dtype) in enumerate(SHAPES[model]):
        if kind == "special":
            tensors.append(special_values(shape, dtype, seed=seed + i))
        else:
            tensors.append(torch.randn(shape, generator=torch.Generator().manual_seed(seed + i)).to(dtype))
    return tensors


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("kind", ["random", "special"])
@pytest.mark.parametrize("model", SERVING)
def test_outputs_have_aoti_runners_bits(model: str, kind: str, protocol: str, served: Served, tmp_path: Path) -> None:
    inputs = model_inputs(model, kind)
    served_outputs = triton_client.infer(served.server.grpc_url if protocol == "grpc" else served.server.http_url,
                                         protocol, model, inputs)
    expected = runner_outputs(served, model, inputs, tmp_path)
    assert same_bits(served_outputs, expected), (model, [t.shape for t in served_outputs])
    if model in (DEMO, DYNAMIC, FP16, SIGNED) and kind == "random":  # identity packages: the inputs' bits too
        assert same_bits(served_outputs, inputs)


def test_models_that_cannot_run_fail_to_load_with_the_reason(served: Served) -> None:
    states = {state.name: state for state in triton_client.model_states(served.server.http_url)}
    for model in SERVING:
        assert states[model].state == "READY", states[model]
    for model, words in BROKEN.items():
        assert states[model].state == "UNAVAILABLE", states[model]
        assert words in states[model].reason, states[model]
    # ... and the others still serve.
    inputs = model_inputs(DEMO, "random", seed=5)
    assert same_bits(triton_client.infer(served.server.http_url, "http", DEMO, inputs), inputs)


def test_a_second_op_library_with_other_bytes_is_refused_not_aborted(served: Served) -> None:
    """Every model carries its own copy of libidentity_conv_ops.so; identical copies load
    once. A copy with other bytes would register my_ops a second time, which aborts
    torch in a static initializer: the backend refuses it before dlopen."""
    name = "conflicting_op_library"
    shutil.copytree(served.bundle(DEMO), served.repository / name / "1")
    with (served.repository / name / "1" / "libidentity_conv_ops.so").open("ab") as library:
        library.write(b"\0")
    config = (served.repository / DEMO / "config.pbtxt").read_text()
    (served.repository / name / "config.pbtxt").write_text(config.replace(f'name: "{DEMO}"', f'name: "{name}"'))
    with pytest.raises(triton_client.ServingError) as error:
        served.server.load_model(name)
    assert "same name and other bytes" in str(error.value) and "libidentity_conv_ops.so" in str(error.value), error.value
    assert served.server.running()
    inputs = model_inputs(DEMO, "random", seed=6)
    assert same_bits(triton_client.infer(served.server.grpc_url, "grpc", DEMO, inputs), inputs)


def send_concurrently(served: Served, model: str, requests: list[list[torch.Tensor]]) -> list[object]:
    """Each request from its own thread over gRPC, all released at once; each result is
    the outputs or the exception."""
    results: list[object] = [None] * len(requests)
    start = threading.Barrier(len(requests))

    def send(i: int) -> None:
        start.wait()
        try:
            results[i] = triton_client.infer(served.server.grpc_url, "grpc", model, requests[i])
        except Exception as error:  # the caller checks each request's result
            results[i] = error

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=2 * triton_client.INFER_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads), "a request did not finish"
    return results


def test_dynamic_batching_merges_concurrent_requests(served: Served) -> None:
    url = served.server.http_url
    before = triton_client.model_statistics(url, DYNAMIC)
    requests = [[torch.randn(1 + i % 3, 3, 6, 4, generator=torch.Generator().manual_seed(100 + i))] for i in range(16)]
    results = send_concurrently(served, DYNAMIC, requests)
    after = triton_client.model_statistics(url, DYNAMIC)
    for sent, got in zip(requests, results):
        assert not isinstance(got, Exception), got
        assert same_bits(got, sent)
    assert after.inference_count - before.inference_count == sum(r[0].shape[0] for r in requests)
    executions = after.execution_count - before.execution_count
    assert executions < len(requests), f"{executions} executions for {len(requests)} requests: nothing merged"


BAD_REQUESTS = {
    # model, inputs, words the error must hold ({0}, {1}: the model's input names)
    "wrong dtype": (DYNAMIC, [torch.zeros(2, 3, 4, 4, dtype=torch.float64)], "data-type is 'FP64'"),
    "wrong rank": (DEMO, [torch.zeros(2, 3, 8)], "Expected [2,3,8,12], got [2,3,8]"),
    "dim out of range": (DYNAMIC, [torch.zeros(1, 3, 65, 4)], "dim 2 expected a size in [1, 64], got 65"),
    "missing input": (PAIR, [torch.zeros(2, 16)], "'{1}'"),
    # PAIR and NAMED are batched (their [B] output through reshape): Triton refuses unequal batches.
    "unequal shared dims": (PAIR, [torch.zeros(2, 16), torch.zeros(3, 16)], "batch size does not match other inputs"),
    "unequal shared dims, by name": (NAMED, [torch.zeros(2, 16), torch.zeros(3, 16)],
                                     "batch size does not match other inputs for 'named_pair'"),
    "missing input, by name": (NAMED, [torch.zeros(2, 16)], "'y'"),
    "empty batch": (DYNAMIC, [torch.zeros(0, 3, 4, 4)], "byte size mismatch for input '{0}'"),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_a_bad_request_gets_its_own_error_and_the_server_keeps_serving(case: str, protocol: str,
                                                                         served: Served) -> None:
    model, inputs, words = BAD_REQUESTS[case]
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    with pytest.raises(triton_client.ServingError) as error:
        triton_client.infer(url, protocol, model, inputs)
    words = words.format(*triton_client.model_tensor_names(served.server.http_url, model).inputs)
    assert words in str(error.value)
    good = model_inputs(DEMO, "random", seed=9)
    assert same_bits(triton_client.infer(url, protocol, DEMO, good), good)


def _named_request(protocol: str, url: str, inputs: dict[str, torch.Tensor], outputs: list[str]) -> dict:
    """One request to NAMED built by hand with tritonclient: inputs and the outputs
    asked for by name. Returns each output by name."""
    if protocol == "http":
        import tritonclient.http as client_module
    else:
        import tritonclient.grpc as client_module
    client = client_module.InferenceServerClient(url.removeprefix("http://"))
    try:
        requests = []
        for name, tensor in inputs.items():
            request = client_module.InferInput(name, list(tensor.shape), "FP32")
            request.set_data_from_numpy(tensor.numpy())
            requests.append(request)
        asked = [client_module.InferRequestedOutput(name) for name in outputs]
        result = client.infer(NAMED, requests, outputs=asked)
        return {name: torch.from_numpy(result.as_numpy(name).copy()) for name in outputs}
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_named_model_is_served_by_its_names(protocol: str, served: Served, tmp_path: Path) -> None:
    """config.pbtxt declares the spec's names; a request by those names, in any order,
    gets the outputs it asks for by name, with aoti_runner's bits. A wrong input name
    fails that request alone."""
    from tritonclient.utils import InferenceServerException

    config = (served.repository / NAMED / "config.pbtxt").read_text()
    for name in (*NAMED_INPUTS, *NAMED_OUTPUTS):
        assert f'name: "{name}"' in config
    assert "INPUT__" not in config and "OUTPUT__" not in config
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    names = triton_client.model_tensor_names(served.server.http_url, NAMED)
    assert (names.inputs, names.outputs, names.reshaped_outputs) == (NAMED_INPUTS, NAMED_OUTPUTS, (1,))
    x, y = model_inputs(NAMED, "random", seed=11)
    expected = dict(zip(NAMED_OUTPUTS, runner_outputs(served, NAMED, [x, y], tmp_path)))
    # By hand, tanh_sum (one value per example, [B] in the package) comes as [B, 1]: the
    # config reshapes it so that Triton can batch the model.
    wire = {**expected, "tanh_sum": expected["tanh_sum"].reshape(-1, 1)}
    got = _named_request(protocol, url, {"y": y, "x": x}, ["tanh_sum"])
    assert list(got) == ["tanh_sum"] and same_bits([got["tanh_sum"]], [wire["tanh_sum"]])
    got = _named_request(protocol, url, {"x": x, "y": y}, list(NAMED_OUTPUTS))
    assert same_bits([got[name] for name in NAMED_OUTPUTS], [wire[name] for name in NAMED_OUTPUTS])

    with pytest.raises(InferenceServerException) as error:
        _named_request(protocol, url, {"x": x, "INPUT__1": y}, ["scaled"])
    assert "INPUT__1" in error.value.message(), error.value.message()
    with pytest.raises(InferenceServerException) as error:
        _named_request(protocol, url, {"x": x, "y": y}, ["OUTPUT__0"])
    assert "OUTPUT__0" in error.value.message(), error.value.message()
    # The server keeps serving: this model by its names, and the others by theirs.
    assert same_bits(triton_client.infer(url, protocol, NAMED, [x, y]), [expected[name] for name in NAMED_OUTPUTS])
    good = model_inputs(DEMO, "random", seed=12)
    assert same_bits(triton_client.infer(url, protocol, DEMO, good), good)


def test_batch_only_tensors_are_served_batched_through_reshape(served: Served, score_package) -> None:
    """A [B] input (a weight per example) and a [B] output (one score per example) are
    declared dims [1] with reshape []: requests carry [n, 1] and get [n, 1] back, the
    backend sees [n] (Triton converts both ways), and concurrent requests are merged into
    fewer executions, each answered with the Python runtime's bits for that request."""
    import tritonclient.http as httpclient

    import aoti_deploy as ad

    url = served.server.http_url
    with urllib.request.urlopen(f"{url}/v2/models/{SCORES}/config") as response:
        config = json.loads(response.read())
    assert config["max_batch_size"] == 16 and "dynamic_batching" in config
    assert ["reshape" in item for item in config["input"] + config["output"]] == [False, True, True, False]
    names = triton_client.model_tensor_names(url, SCORES)
    assert (names.inputs, names.outputs) == (("x", "w"), ("output_0", "output_1"))
    assert (names.reshaped_inputs, names.reshaped_outputs) == ((1,), (0,))

    package = ad.load(score_package.path)
    try:
        # By hand with tritonclient: w goes as [n, 1], the scores come back as [n, 1].
        x, w = model_inputs(SCORES, "special", seed=21)
        n = x.shape[0]
        expected = package.run([x, w])
        assert [tuple(t.shape) for t in expected] == [(n,), (n, 8)]
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        try:
            sent = [httpclient.InferInput("x", [n, 8], "FP32"), httpclient.InferInput("w", [n, 1], "FP32")]
            sent[0].set_data_from_numpy(x.numpy(), binary_data=True)
            sent[1].set_data_from_numpy(w.reshape(n, 1).numpy(), binary_data=True)
            result = client.infer(SCORES, sent)
            scores, weighted = (torch.from_numpy(result.as_numpy(name).copy()) for name in names.outputs)
            assert tuple(scores.shape) == (n, 1)
            assert same_bits([scores.reshape(n), weighted], expected)
            # w as the package's [n] is not what the config declares: Triton refuses it.
            sent[1] = httpclient.InferInput("w", [n], "FP32")
            sent[1].set_data_from_numpy(w.numpy(), binary_data=True)
            with pytest.raises(Exception, match=r"unexpected shape for input 'w'"):
                client.infer(SCORES, sent)
        finally:
            client.close()

        # Concurrent requests of 1 to 3 examples: merged, each with its own bits. Random
        # values only: where both operands of a multiply are NaN, which NaN comes out can
        # depend on the batch's size (the kernel's vector loop against its tail), so a
        # special-value row may get another NaN payload in a merged batch than alone (see
        # docs/triton.md); special values are compared request by request above.
        before = triton_client.model_statistics(url, SCORES)
        requests = [model_inputs(SCORES, "random", seed=300 + i) for i in range(16)]
        requests = [[x[: 1 + i % 3], w[: 1 + i % 3]] for i, (x, w) in enumerate(requests)]
        results = send_concurrently(served, SCORES, requests)
        after = triton_client.model_statistics(url, SCORES)
        for sent_tensors, got in zip(requests, results):
            assert not isinstance(got, Exception), got
            assert same_bits(got, package.run(sent_tensors)), [t.shape for t in got]
        assert after.inference_count - before.inference_count == sum(r[0].shape[0] for r in requests)
        executions = after.execution_count - before.execution_count
        assert executions < len(requests), f"{executions} executions for {len(requests)} requests: nothing merged"
    finally:
        package.close()


def test_concurrent_bad_requests_fail_alone(served: Served) -> None:
    """Concurrent good and bad requests to the batching model: each bad one gets its
    error, each good one its bits. (Triton's batcher merges only requests of one shape,
    so these bad ones never share an execution with good ones.)"""
    requests = []
    for i in range(12):
        height = 65 if i % 4 == 3 else 5  # height 65 is outside the package's 1..64
        requests.append([torch.randn(2, 3, height, 4, generator=torch.Generator().manual_seed(200 + i))])
    results = send_concurrently(served, DYNAMIC, requests)
    for i, (sent, got) in enumerate(zip(requests, results)):
        if i % 4 == 3:
            assert isinstance(got, triton_client.ServingError) and "got 65" in str(got), got
        else:
            assert isinstance(got, list) and same_bits(got, sent), got


def test_statistics_and_metrics_count_the_requests(served: Served) -> None:
    """Three requests move every counter by three: the statistics endpoint's counts and
    each phase's count, and Prometheus' success counter. Each phase takes time."""
    import json
    import urllib.request

    url = served.server.http_url

    def snapshot() -> tuple[object, dict, int]:
        with urllib.request.urlopen(f"{url}/v2/models/{DEMO}/stats", timeout=10) as response:
            phases = json.load(response)["model_stats"][0]["inference_stats"]
        with urllib.request.urlopen(served.server.metrics_url, timeout=10) as response:
            metrics = response.read().decode()
        success = re.search(r'nv_inference_request_success\{model="demo",version="1"\} (\d+)', metrics)
        assert success, metrics[:2000]
        return triton_client.model_statistics(url, DEMO), phases, int(success.group(1))

    counts_before, phases_before, success_before = snapshot()
    inputs = model_inputs(DEMO, "random", seed=11)
    for _ in range(3):
        triton_client.infer(url, "http", DEMO, inputs)
    counts_after, phases_after, success_after = snapshot()
    assert counts_after.inference_count - counts_before.inference_count == 3
    assert counts_after.execution_count - counts_before.execution_count == 3
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        count = int(phases_after[phase]["count"]) - int(phases_before[phase]["count"])
        elapsed = int(phases_after[phase]["ns"]) - int(phases_before[phase]["ns"])
        assert count == 3 and elapsed > 0, (phase, phases_before[phase], phases_after[phase])
    assert success_after - success_before == 3


def test_no_libpython_in_the_backend_or_the_serving_process(served: Served) -> None:
    backend = served.build.dir / "backends" / "aoti" / "libtriton_aoti.so"
    ldd = subprocess.run(["ldd", str(backend)], capture_output=True, text=True, check=True).stdout
    assert "libtorch_cpu" in ldd and "libpython" not in ldd, ldd
    mapped = served.server.mapped_objects()
    assert any("libtriton_aoti.so" in path for path in mapped) and any("libtorch_cpu" in path for path in mapped)
    assert not [path for path in mapped if "libpython" in path]


def test_load_many_clients_no_failures_no_growth(served: Served) -> None:
    """8 gRPC clients x 1000 requests: no failed request, no output with other bits,
    and the server's RSS at the end within 1.1x of its value after warm-up."""
    import tritonclient.grpc as grpcclient

    clients, per_client = 8, 1000
    inputs = model_inputs(DEMO, "random", seed=21)
    for _ in range(50):
        triton_client.infer(served.server.grpc_url, "grpc", DEMO, inputs)
    warm_rss = served.server.rss_bytes()
    failures: list[str] = []
    mismatches = [0] * clients
    answered = [0] * clients

    def client(c: int) -> None:
        connection = grpcclient.InferenceServerClient(served.server.grpc_url)
        try:
            for _ in range(per_client):
                try:
                    outputs = triton_client.infer(connection, "grpc", DEMO, inputs)
                except Exception as error:  # counted, not raised: every client finishes
                    failures.append(str(error))
                    continue
                answered[c] += 1
                if not same_bits(outputs, inputs):
                    mismatches[c] += 1
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=900)
    assert not any(thread.is_alive() for thread in threads), "a client did not finish"
    end_rss = served.server.rss_bytes()
    assert not failures, failures[:3]
    assert sum(answered) == clients * per_client
    assert sum(mismatches) == 0
    assert end_rss <= 1.1 * warm_rss, f"RSS grew from {warm_rss} to {end_rss} bytes"


def _one_model_server(served: Served, tmp: Path, models: list[str], backend_config: str):
    """A second, short-lived server for a server-wide setting (the session's server has
    none), on a repository holding copies of ``models``."""
    repository = tmp / "repository"
    for model in models:
        shutil.copytree(served.repository / model, repository / model)
    return triton_server.TritonServer().start(
        repository, backend_dir=served.build.dir / "backends", log_file=tmp / "tritonserver.log",
        extra_args=[f"--backend-config=aoti,{backend_config}"])


def test_a_server_wide_trusted_key_refuses_unsigned_bundles(served: Served, tmp_path: Path) -> None:
    """--backend-config=aoti,trusted-key=PUB: the signed bundle loads, the unsigned one is
    refused although its own config names no key."""
    with _one_model_server(served, tmp_path, [DEMO, SIGNED], f"trusted-key={served.keys / 'sign.pub'}") as server:
        server.wait_ready(60, models=[SIGNED])
        states = {state.name: state for state in triton_client.model_states(server.http_url)}
        assert states[DEMO].state == "UNAVAILABLE" and "is not signed" in states[DEMO].reason, states[DEMO]
        assert "--backend-config=aoti,trusted-key" in states[DEMO].reason
        inputs = model_inputs(SIGNED, "random", seed=3)
        assert same_bits(triton_client.infer(server.http_url, "http", SIGNED, inputs), inputs)
    assert not Path(f"/proc/{server.pid}").exists()


def test_a_misspelt_server_setting_is_an_error_not_ignored(served: Served, tmp_path: Path) -> None:
    """trusted_key (the model parameter's spelling) on the command line must not leave
    the server unverified: the backend refuses to start, and says which keys it takes."""
    with _one_model_server(served, tmp_path, [DEMO], f"trusted_key={served.keys / 'sign.pub'}") as server:
        deadline = time.monotonic() + 60
        while True:
            states = {}
            try:
                states = {state.name: state for state in triton_client.model_states(server.http_url)}
            except triton_client.ServingError:
                pass
            if DEMO in states and states[DEMO].state == "UNAVAILABLE":
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.2)
        assert "unknown setting" in states[DEMO].reason and "trusted-key=PUB.pem" in states[DEMO].reason


# --- Model lifecycle: parallel loads, start-up, reloads, overflow, faults ------------

def copy_model(served: Served, source: str, name: str, *, instances: int = 1,
               parameters: dict[str, str] | None = None) -> str:
    """A copy of a served model's bundle under another name (no compile), with its own
    instance count and extra config parameters."""
    model = write_repository(served.bundle(source), served.repository, name=name, instances=instances,
                             max_queue_delay_us=20000)
    if parameters:
        config = model.config_path
        extra = "".join(f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
                        for key, value in parameters.items())
        config.write_text(config.read_text() + extra)
    return name


def unload_and_wait(server: "triton_server.TritonServer", model: str, timeout: float = 60.0) -> None:
    """Unload, then wait until Triton has finalized the model (unload returns before)."""
    server.unload_model(model)
    deadline = time.monotonic() + timeout
    while True:
        states = {state.name: state for state in triton_client.model_states(server.http_url)}
        if model not in states or states[model].state == "UNAVAILABLE":
            return
        assert time.monotonic() < deadline, f"{model} still {states[model]} after unloading"
        time.sleep(0.02)


def in_parallel(action, names: list[str]) -> list[str]:
    """``action(name)`` for every name, each on its own thread, started at once; the
    failures, as messages."""
    errors: list[str] = []
    start = threading.Barrier(len(names))

    def run(name: str) -> None:
        start.wait()
        try:
            action(name)
        except Exception as error:  # collected: every thread finishes
            errors.append(f"{name}: {error}")

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a load or unload did not finish"
    return errors


def test_eight_models_load_and_unload_in_parallel(served: Served) -> None:
    """Triton loads models on parallel threads: torch's loader keeps its JSON in one
    static, so before the lock some loads failed and the heap was corrupted."""
    names = [copy_model(served, DEMO, f"parallel_{i}", instances=2) for i in range(8)]
    inputs = model_inputs(DEMO, "random", seed=31)
    server = served.server
    for round_ in range(20):
        errors = in_parallel(server.load_model, names)
        assert not errors, (round_, errors)
        assert server.running(), server.log_tail()
        for name in names:
            assert same_bits(triton_client.infer(server.grpc_url, "grpc", name, inputs), inputs), (round_, name)
        errors = in_parallel(lambda name: unload_and_wait(server, name), names)
        assert not errors, (round_, errors)
    assert server.running()
    assert same_bits(triton_client.infer(server.http_url, "http", DEMO, inputs), inputs)


def extracted_model_dirs(server: "triton_server.TritonServer") -> set[Path]:
    """The folders torch's loader extracted the server's model libraries into."""
    return {Path(path.split("/data/aotinductor/")[0]) for path in server.mapped_objects()
            if "/data/aotinductor/" in path}


def test_a_repository_of_several_models_loads_at_start_up(served: Served, tmp_path: Path) -> None:
    """Six 2-instance models loaded by Triton at start-up, in parallel, four times: each
    start serves every model, and each shutdown removes what the loaders extracted.
    (The soak, tests/test_triton_soak.py, loads and unloads under requests at length.)"""
    repository = tmp_path / "repository"
    names = [f"startup_{i}" for i in range(6)]
    for name in names:
        write_repository(served.bundle(DEMO), repository, name=name, instances=2)
    inputs = model_inputs(DEMO, "random", seed=32)
    for start in range(4):
        server = triton_server.TritonServer().start(
            repository, backend_dir=served.build.dir / "backends", log_file=tmp_path / f"tritonserver_{start}.log")
        with server:
            server.wait_ready(120, models=names)
            for name in names:
                assert same_bits(triton_client.infer(server.http_url, "http", name, inputs), inputs), (start, name)
            extracted = extracted_model_dirs(server)
            assert extracted, server.mapped_objects()
        assert not Path(f"/proc/{server.pid}").exists()
        assert server.process.returncode == 0, (start, server.log_tail())
        left = [path for path in extracted if path.exists()]
        assert not left, f"start {start}: the extracted folders {left} outlived the server"


def test_a_model_load_removes_what_killed_runners_left_in_tmpdir(build: Build, compiled_package: CompiledPackage,
                                                                 tmp_path: Path) -> None:
    """The backend's model load sweeps $TMPDIR as a runner's start does: the unpacked
    folder of a process that is gone goes, a live process's stays (the rule and the
    kills themselves: test_signed_bundles.py, the contract's private folder vectors)."""
    require_triton_server()
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    orphan = temp / f"aoti_deploy_unpacked_{gone.pid}_1_orphan"
    live = temp / f"aoti_deploy_unpacked_{os.getpid()}_{start}_live01"
    for folder in (orphan, live):
        folder.mkdir(mode=0o700)
        (folder / "wrapper.so").write_bytes(b"left")
    repository = tmp_path / "repository"
    write_repository(compiled_package.path, repository, name=DEMO, op_libraries=[build.op_library])
    with triton_server.TritonServer().start(repository, backend_dir=build.dir / "backends",
                                            log_file=tmp_path / "tritonserver.log",
                                            env={"TMPDIR": str(temp)}) as server:
        server.wait_ready(120, models=[DEMO])
        assert not orphan.exists()
        assert (live / "wrapper.so").read_bytes() == b"left"


def process_snapshot(pid: int) -> dict[str, object]:
    proc = Path(f"/proc/{pid}")
    maps = (proc / "maps").read_text().splitlines()
    fds = []
    for fd in (proc / "fd").iterdir():
        try:
            fds.append(os.readlink(fd))
        except OSError:  # closed since listed
            pass
    rss = next(int(line.split()[1]) * 1024 for line in (proc / "status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return {
        "rss": rss, "maps": len(maps), "fds": len(fds),
        "deleted": sorted({line.split(maxsplit=5)[5] for line in maps if line.endswith(" (deleted)")}
                          | {link for link in fds if link.endswith(" (deleted)")}),
    }


def test_reloading_a_model_100_times_stays_flat(served: Served) -> None:
    """Load, serve, unload a 2-instance model 100 times: after a warm-up of 10 cycles the
    server's RSS, its mappings and its fds stay within 1.1x, and the cycles leave no
    deleted file held open (before: one more copy of the model library mapped per
    instance per reload)."""
    name = copy_model(served, DEMO, "reloaded", instances=2)
    server = served.server
    inputs = [model_inputs(DEMO, "random", seed=40 + i) for i in range(4)]

    def cycle() -> None:
        server.load_model(name)
        for sent in inputs:
            assert same_bits(triton_client.infer(server.grpc_url, "grpc", name, sent), sent)
        unload_and_wait(server, name)

    for _ in range(10):
        cycle()
    warm = process_snapshot(server.pid)
    for _ in range(90):
        cycle()
    end = process_snapshot(server.pid)
    print(f"after 10 cycles: {warm}\nafter 100 cycles: {end}")
    for key in ("rss", "maps", "fds"):
        assert end[key] <= 1.1 * warm[key], f"{key} grew from {warm[key]} to {end[key]}"
    # No deleted file held open by these reloads. Loaders of other packages that the
    # pool destroyed earlier in the session keep their libraries mapped (glibc cannot
    # unmap them): those were there before the cycles, and stay as they were.
    assert set(end["deleted"]) <= set(warm["deleted"]), sorted(set(end["deleted"]) - set(warm["deleted"]))
    assert server.running()


def test_a_request_whose_size_overflows_is_refused_with_a_message(served: Served, tmp_path: Path) -> None:
    """A model with unbounded height and width: [1, 3, 2^31, 2^31] float32 holds 3 * 2^64
    bytes, which wraps to 0 in 64 bits, so 0 bytes of data passed Triton's check and the
    backend's. The backend must refuse it, saying why."""
    source = served.bundle(DYNAMIC) / "model.pt2"
    spec = read_package_spec(source)
    unbounded = {"min": 1, "max": 2**63 - 1}

    def widened(tensors) -> list[dict[str, object]]:
        return [{"dtype": t.dtype, "dims": [{"min": d.min, "max": d.max} for d in t.dims[:2]] + [unbounded] * 2}
                for t in tensors]

    package = edit_spec(source, tmp_path / "unbounded.pt2", inputs=widened(spec.inputs),
                        outputs=widened(spec.outputs))
    name = "unbounded_hw"
    write_repository(package, served.repository, name=name, op_libraries=[served.build.op_library])
    server = served.server
    server.load_model(name)
    try:
        # KServe's binary extension: the header, then the input's 0 bytes.
        header = json.dumps({"inputs": [{"name": "INPUT__0", "shape": [1, 3, 2**31, 2**31], "datatype": "FP32",
                                         "parameters": {"binary_data_size": 0}}]}).encode()
        reply = urllib.request.Request(f"{server.http_url}/v2/models/{name}/infer", method="POST", data=header,
                                       headers={"Content-Type": "application/octet-stream",
                                                "Inference-Header-Content-Length": str(len(header))})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(reply, timeout=60)
        message = refused.value.read().decode(errors="replace")
        assert "[1, 3, 2147483648, 2147483648]" in message and "overflows a 64-bit integer" in message, message
        # The model still serves a request of a sane size.
        sane = [torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(50))]
        assert same_bits(triton_client.infer(server.http_url, "http", name, sane), sane)
    finally:
        unload_and_wait(server, name)
    assert server.running()


@pytest.mark.parametrize("step", ["before_run", "after_run", "answering"])
def test_a_fault_in_execute_still_answers_every_request(step: str, served: Served) -> None:
    """The test-only test_fault parameter makes execute throw at a step: after reading
    the requests, after running them (where a failed device synchronize throws, with the
    outputs written), or while answering. Every request of every batch gets an error
    that says so, none hangs, and the server keeps serving."""
    name = copy_model(served, DYNAMIC, f"fault_{step}", parameters={"test_fault": step})
    server = served.server
    server.load_model(name)
    try:
        requests = [[torch.randn(1 + i % 2, 3, 6, 4, generator=torch.Generator().manual_seed(60 + i))]
                    for i in range(12)]
        results = send_concurrently(served, name, requests)
        for got in results:
            assert isinstance(got, Exception), f"a request succeeded despite the fault at {step}"
            assert f"injected test fault at {step}" in str(got), got
    finally:
        unload_and_wait(server, name)
    inputs = model_inputs(DYNAMIC, "random", seed=61)
    assert same_bits(triton_client.infer(server.grpc_url, "grpc", DYNAMIC, inputs), inputs)


@pytest.mark.parametrize("case", HOSTILE_PACKAGES, ids=[case.id for case in HOSTILE_PACKAGES])
def test_a_crafted_package_fails_its_load_and_the_server_keeps_serving(case, served: Served) -> None:
    """The crafted packages both runners refuse (test_hostile_files.py), as a model's
    bundle: the load fails with the same reason, nothing escapes the extraction folder,
    and the server goes on answering."""
    escape = Path("/tmp") / HOSTILE_ESCAPE
    escape.unlink(missing_ok=True)
    name = f"hostile_{case.id.replace('-', '_')}"
    shutil.copytree(served.bundle(DEMO), served.repository / name / "1")
    package = rewrite_zip(served.bundle(DEMO) / "model.pt2", served.repository / name / "1" / "model.pt2", case.edit,
                          case.extra)
    if case.raw is not None:
        with zipfile.ZipFile(package) as archive:
            prefix = archive.namelist()[0].split("/")[0]
        package.write_bytes(case.raw(package.read_bytes(), prefix))
    config = (served.repository / DEMO / "config.pbtxt").read_text()
    (served.repository / name / "config.pbtxt").write_text(config.replace(f'name: "{DEMO}"', f'name: "{name}"'))
    with pytest.raises(triton_client.ServingError) as error:
        served.server.load_model(name)
    assert case.message in str(error.value), error.value
    assert not escape.exists()
    assert served.server.running()
    inputs = model_inputs(DEMO, "random", seed=8)
    assert same_bits(triton_client.infer(served.server.http_url, "http", DEMO, inputs), inputs)


def test_rolling_through_package_versions_keeps_two_idle_packages(served: Served) -> None:
    """One model name served from six packages in turn (other bytes each): the pool keeps
    the loaders of the two packages no model holds that were freed last and destroys
    older ones, so versions do not pile up their weights (before: every version's loader
    stayed until shutdown)."""
    name = "rolled"
    copy_model(served, DEMO, name)
    package = served.repository / name / "1" / "model.pt2"
    original = package.read_bytes()
    log = served.server.log_file
    assert log is not None
    counts: list[tuple[int, int]] = []
    for version in range(6):
        package.write_bytes(original)
        rewrite_metadata(package, package, {"rollout": str(version)})
        offset = log.stat().st_size
        served.server.load_model(name)
        inputs = model_inputs(DEMO, "random", seed=60 + version)
        assert same_bits(triton_client.infer(served.server.grpc_url, "grpc", name, inputs), inputs)
        unload_and_wait(served.server, name)
        with log.open("rb") as text:
            text.seek(offset)
            lines = [line for line in text.read().decode(errors="replace").splitlines()
                     if f"model {name} version 1: built a loader" in line]
        assert len(lines) == 1, lines
        found = re.search(r"the process holds (\d+) loader\(s\), (\d+) in use", lines[0])
        assert found, lines[0]
        counts.append((int(found.group(1)), int(found.group(2))))
    print(f"(loaders, in use) at each load: {counts}")
    # Versions 1 and 2 may stay as the two idle packages; from version 3 on, each load
    # evicts one: the count of loaders stops growing.
    assert counts[-1][0] <= counts[2][0], counts
    assert served.server.running()


def test_a_model_served_at_another_thread_count_than_its_compile_is_logged(served: Served) -> None:
    """The backend logs a warning when a model's instances run at another intra-op
    thread count than the package was compiled (its weights laid out) for, naming both
    fixes; at the recorded count, none."""
    from aoti_deploy.package.archive import read_package_spec

    log = served.server.log_file
    assert log is not None
    compiled = read_package_spec(served.repository / DEMO / "1" / "model.pt2").intra_op_threads
    assert compiled >= 1
    warned = {}
    for name, threads in (("threads_as_compiled", compiled), ("threads_other", compiled + 1)):
        copy_model(served, DEMO, name, parameters={"intra_op_threads": str(threads)})
        offset = log.stat().st_size
        served.server.load_model(name)
        unload_and_wait(served.server, name)
        with log.open("rb") as text:
            text.seek(offset)
            warned[threads] = [line for line in text.read().decode(errors="replace").splitlines()
                               if f"model {name}: this package was compiled for" in line]
    assert warned[compiled] == []
    (line,) = warned[compiled + 1]
    assert (f"compiled for {compiled} intra-op thread(s) and runs at {compiled + 1}" in line
            and f"export with --threads {compiled + 1}" in line
            and f"Or set the model's intra_op_threads parameter to {compiled}." in line), line
    assert served.server.running()


def _bad_requests_fail_alone(served: Served, name: str, package: Path, model: torch.nn.Module,
                             requests: list[list[torch.Tensor]], bad: dict[int, str], seed: int,
                             status: str | None = None) -> None:
    """Serve ``package`` as ``name``, batching (a long queue delay: the concurrent
    requests meet in the queue), and send ``requests`` concurrently: each of ``bad``
    (position -> words) gets its own error (of ``status``, when given), every other one
    eager's bits, and the server keeps serving the demo model. Unloaded after."""
    write_repository(package, served.repository, name=name, max_queue_delay_us=20000)
    served.server.load_model(name)
    try:
        before = triton_client.model_statistics(served.server.http_url, name)
        results = send_concurrently(served, name, requests)
        after = triton_client.model_statistics(served.server.http_url, name)
        for i, (sent, got) in enumerate(zip(requests, results)):
            if i in bad:
                assert isinstance(got, triton_client.ServingError) and bad[i] in str(got), got
                if status is not None:
                    assert status in str(got.__cause__.status()), got.__cause__.status()
                continue
            with torch.no_grad():
                expected = list(model(*sent))
            assert isinstance(got, list) and same_bits(got, expected), got
        assert after.inference_count - before.inference_count == len(requests) - len(bad)
        assert served.server.running()
        good = model_inputs(DEMO, "random", seed=seed)
        assert same_bits(triton_client.infer(served.server.http_url, "http", DEMO, good), good)
    finally:
        unload_and_wait(served.server, name)


def test_an_index_out_of_range_fails_its_request_alone(served: Served, lookup_package) -> None:
    """Concurrent requests of one shape to a batching model whose integer inputs index
    tensors, two of them with an index out of range. Before the value check, one such
    request aborted the whole server from the compiled kernel's OpenMP region. Now each
    bad one gets its own line, the good ones (batched together) their bits, and the
    server keeps serving."""
    requests = [list(lookup_inputs(batch=1, seed=300 + i)) for i in range(8)]
    requests[2][0][0, 3] = 5000
    requests[5][3][0, 1] = -10
    specs = read_package_spec(lookup_package.path).inputs  # named by the spec, when it records names
    bad = {
        2: f"{tensor_label('input', 0, specs)}: value 5000 at [0, 3] is outside [0, 999] (this input indexes: "
           "embedding rows 0..999).",
        5: f"{tensor_label('input', 3, specs)}: value -10 at [0, 1] is outside [-9, 8]",
    }
    _bad_requests_fail_alone(served, "lookup", lookup_package.path, LookupModel(), requests, bad, seed=31)


@pytest.mark.parametrize("model", ["bert", "gpt2", "t5_encoder", "vit", "resnet"])
def test_a_transformers_model_serves_by_its_own_names(served: Served, zoo, model: str, tmp_path: Path) -> None:
    """Each model of the zoo in the session's server: its config names the model's
    inputs and outputs (input_ids, attention_mask, last_hidden_state, logits,
    pixel_values, ...), a request by those names gets the package's bits over HTTP and
    gRPC; for BERT, an out-of-vocabulary id fails that request alone, and the server
    keeps serving."""
    from conftest import NAMES, zoo_other_shape

    entry = zoo[model]
    name = f"zoo_{model}"
    # Without dynamic batching, each request runs alone: the bits equal the package's
    # on that request (a merged batch may tile a GEMM differently; docs, Known limits).
    write_repository(entry.package.path, served.repository, name=name, dynamic_batching=False)
    config = (served.repository / name / "config.pbtxt").read_text()
    inputs_named, outputs_named = NAMES[model]
    for tensor in inputs_named + outputs_named:
        assert f'name: "{tensor}"' in config, config
    served.server.load_model(name)
    try:
        kwargs = zoo_other_shape(model)
        inputs = [kwargs[key] for key in inputs_named]
        got = triton_client.infer(served.server.http_url, "http", name, inputs)
        assert same_bits(got, runner_outputs(served, name, inputs, tmp_path / "runner"))
        if model == "bert":
            bad = inputs[0].clone()
            bad[2, 4] = 5000
            with pytest.raises(triton_client.ServingError,
                               match=r"input\[0\] \(input_ids\): value 5000 at \[2, 4\]"):
                triton_client.infer(served.server.http_url, "http", name, [bad, inputs[1]])
        assert served.server.running()
        assert same_bits(triton_client.infer(served.server.grpc_url, "grpc", name, inputs), got)
    finally:
        unload_and_wait(served.server, name)


def test_a_computed_index_out_of_range_fails_its_request_alone(served: Served, computed_index_package) -> None:
    """Indices computed from the inputs (ids * 3 + 7 into an embedding, take, scatter,
    index_put...) pass the request's checks and fail inside the run, at the package's
    own index checks. Before them one such request aborted the server. Now each bad
    request of a concurrent, batched set gets its own INVALID_ARG error, the good ones
    (whose merged batch the bad one failed) run again alone and get eager's bits, and
    the server keeps serving."""
    requests = [list(computed_index_inputs(batch=1, seed=400 + i)) for i in range(8)]
    requests[1][0][0, 3] = 331  # ids * 3 + 7 = 1000 rows
    requests[4][1][0, 0] = -2501  # take at picks * 2 + 1 = -5001
    requests[6][3][0, 2] = 29  # index_put at cells + 1 = 30
    bad = {1: "embedding in 'embedding' takes indices in 0..999", 4: "take takes indices in -5000..4999",
           6: "index_put takes indices in -30..29"}
    _bad_requests_fail_alone(served, "computed_index", computed_index_package.path, ComputedIndexModel(), requests,
                             bad, seed=32, status="INVALID_ARG")


def test_scalar_outputs_are_served_as_one_element_tensors(served: Served, scalar_packages, tmp_path: Path) -> None:
    """PyTorch's test_symint_item and the model returning every kind of Python scalar,
    served by the session's server: each config declares a scalar output as dims [1]
    (no reshape: Triton refuses an empty one without batching; and no batching), a
    response carries it as a one-element tensor of its kind's dtype, with aoti_runner's
    bits over HTTP and gRPC, and eager's value."""
    from aoti_deploy.serve.triton_config import TensorNames
    from examples.scalar_models import BatchStats, SymIntItem, batch_stats_inputs, symint_item_inputs

    cases = [("symint_item", scalar_packages.item, list(symint_item_inputs(-7)), SymIntItem()),
             ("batch_stats", scalar_packages.stats, list(batch_stats_inputs(6, seed=2)), BatchStats())]
    for name, package, inputs, model in cases:
        write_repository(package.path, served.repository, name=name)
        config = (served.repository / name / "config.pbtxt").read_text()
        assert "max_batch_size: 0" in config and "dynamic_batching" not in config, config
        scalars = [k for k, t in enumerate(package.spec.outputs) if t.is_scalar]
        assert "reshape" not in config, config
        for k in scalars:
            assert f'name: "{package.spec.outputs[k].name}"\n    data_type: ' in config
        served.server.load_model(name)
        try:
            expected = runner_outputs(served, name, inputs, tmp_path / name)
            assert all(expected[k].dim() == 0 for k in scalars)
            names = TensorNames.of_spec(package.spec)
            assert names.scalar_outputs == tuple(scalars)
            for protocol, url in (("http", served.server.http_url), ("grpc", served.server.grpc_url)):
                # With the package's names (its spec), each scalar back in the package's 0-d shape.
                assert same_bits(triton_client.infer(url, protocol, name, inputs, names), expected)
                # As the server answers (the names its config declares): one element each.
                wire = triton_client.infer(url, protocol, name, inputs)
                assert [tuple(t.shape) for t in wire] == [(1,) if k in scalars else tuple(expected[k].shape)
                                                          for k in range(len(expected))]
                assert same_bits([t.reshape(expected[k].shape) for k, t in enumerate(wire)], expected)
            eager = model(*inputs)
            eager = list(eager.values()) if isinstance(eager, dict) else [eager]
            for k in scalars:
                if package.spec.outputs[k].kind != "float":
                    assert expected[k].item() == eager[k], (k, expected[k], eager[k])
        finally:
            unload_and_wait(served.server, name)
        assert served.server.running()

