"""The benchmark's Triton section, for structure only (no timing assertions): one real
tritonserver with tiny counts on the suite's package and a dynamic-batch export of the
same model, its tables, targets, JSON and Markdown; and the reason it gives when it
cannot run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import aoti_deploy.bench.triton as triton_stage
from conftest import PACKAGE_SHAPE, Build, CompiledPackage, skip_or_fail_without_triton
from aoti_deploy.bench.benchmark import BenchReport
from aoti_deploy.bench.benchmark_report import markdown_table, write_json
from aoti_deploy.bench.results import Latency
from aoti_deploy.bench.triton_report import triton_latency_table, triton_targets, triton_throughput_table
from aoti_deploy.compiler.options import ExportOptions
from aoti_deploy.compiler.pipeline import export_and_compile
from aoti_deploy.models.example import IdentitySource

@pytest.fixture(scope="module")
def triton_bench(tmp_path_factory: pytest.TempPathFactory, build: Build, op_library: Path,
                 compiled_package: CompiledPackage) -> triton_stage.TritonBench:
    """The section, run once with tiny counts; the in-process reference is measured by
    the stage itself (aoti_runner --bench on the suite's package)."""
    reason = triton_stage.triton_unavailable_reason(build.runner)
    if reason:
        skip_or_fail_without_triton(f"the Triton section cannot run here: {reason}")
    work = tmp_path_factory.mktemp("triton_bench")
    _, channels, height, width = PACKAGE_SHAPE
    built = export_and_compile(IdentitySource(
        batch=1, channels=channels, height=height, width=width, dynamic=("batch",),
        ranges={"batch": (1, triton_stage.MAX_BATCH), "height": (height, height), "width": (width, width)}),
        ExportOptions(op_libraries=[op_library]), work / "dynamic.pt2")
    assert built.passed
    steps: list[str] = []
    result = triton_stage.measure_triton(
        work, compiled_package.path, built.package_path, op_library, triton_stage.resolve_backend_dir(build.runner),
        build.runner, requests=5, seconds=0.1, on_step=steps.append)
    assert steps and all(step.startswith("Triton: ") for step in steps)
    # The one server of the section was stopped: no process is left serving its repository.
    repository = str(work / "triton_repository")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert repository not in cmdline.read_bytes().decode(errors="replace"), cmdline
        except OSError:  # a process that ended meanwhile
            pass
    return result


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.triton
def test_latency_table_has_every_row_with_a_finite_ratio(triton_bench):
    header, rows = triton_latency_table(triton_bench)
    assert header[-1] == "p50 / in-process p50" and all(len(row) == len(header) for row in rows)
    names = [row[0] for row in rows]
    assert names[0].startswith("in-process: aoti_runner --bench")
    for wanted in ("Triton HTTP client p50/p99", "Triton gRPC client p50/p99", "server queue p50",
                   "server compute_input p50", "server compute_infer p50", "server compute_output p50",
                   "server total per request p50"):
        assert sum(name.startswith(wanted) for name in names) == 1, (wanted, names)
    for row in rows:
        assert _finite_positive(float(row[-1].removesuffix("x"))), row
    assert rows[0][-1] == "1.00x"
    assert triton_bench.http.runs == triton_bench.grpc.runs == 5
    assert all(triton_bench.phases[p].runs == 5 for p in (*triton_stage.PHASES, triton_stage.TOTAL))
    assert triton_bench.shape == PACKAGE_SHAPE
    assert triton_bench.in_process.intra_op_threads >= 1 and triton_bench.server_intra_op_threads >= 1
    # The total is the phases added, request by request, so its p50 is no less than any phase's.
    assert triton_bench.phases["total"].p50 >= max(triton_bench.phases[p].p50 for p in triton_stage.PHASES)


@pytest.mark.triton
def test_throughput_table_covers_both_models_and_every_client_count(triton_bench):
    header, rows = triton_throughput_table(triton_bench)
    assert [(row[0], int(row[1])) for row in rows] == [
        (model, clients) for model in (triton_stage.BATCHING_MODEL, triton_stage.NOBATCHING_MODEL)
        for clients in triton_stage.CLIENTS]
    for run in triton_bench.throughput:
        assert run.requests >= run.clients and _finite_positive(run.throughput)
        # Every timed request was inferred, and none of the other runs' requests leaked in.
        assert run.inferences == run.requests and 1 <= run.executions <= run.requests
        if run.model == triton_stage.NOBATCHING_MODEL:
            assert run.executions == run.requests  # no batcher: one request per execution
    for row in rows:
        assert _finite_positive(float(row[-1].removesuffix("x")))
    for model in (triton_stage.BATCHING_MODEL, triton_stage.NOBATCHING_MODEL):
        assert _finite_positive(triton_bench.scaling(model))


@pytest.mark.triton
def test_targets_json_and_markdown(triton_bench, tmp_path):
    found = triton_targets(triton_bench)
    assert [t.name.split(":")[0].split(" <=")[0] for t in found] == [
        "Triton compute_infer p50", "Triton server total p50", "Triton dynamic batching"]
    report = BenchReport({"cpu": "test", "cores": "2"}, "test", 0.01, True, 1, triton=triton_bench)
    data = json.loads(write_json(report, tmp_path / "bench.json").read_text())
    ratios = data["triton"]["ratios"]
    assert {"http_p50", "grpc_p50", "server_compute_infer_p50", "server_total_p50",
            "throughput_scaling_demo_batching", "throughput_scaling_demo_nobatching"} <= set(ratios)
    assert all(_finite_positive(value) for value in ratios.values())
    assert all(_finite_positive(run["throughput"]) for run in data["triton"]["throughput"])
    markdown = markdown_table(report)
    assert "| Triton gRPC client p50/p99" in markdown and "| server compute_infer p50/p99 |" in markdown
    assert f"| {triton_stage.BATCHING_MODEL} | 16 |" in markdown
    assert "| Triton target (reported, not enforced) | measured | result |" in markdown
    assert "PASS" in markdown or "MISS" in markdown


def test_section_says_why_it_was_skipped(tmp_path, monkeypatch):
    """Without the extra (or the backend) the benchmark goes on and says why."""
    import aoti_deploy.bench.benchmark as benchmark_stage

    monkeypatch.setattr(triton_stage, "triton_unavailable_reason", lambda runner=None: "tritonserver is missing")
    report = BenchReport({"cpu": "test", "cores": "2"}, "test", 0.01, True, 1)
    benchmark_stage._measure_triton(tmp_path, tmp_path / "aoti_runner", tmp_path / "lib.so", True,
                                    lambda name: pytest.fail("nothing is measured"), report)
    assert report.triton is None and report.triton_skipped == "tritonserver is missing"
    assert "Triton section skipped: tritonserver is missing" in markdown_table(report)


def test_the_benchmark_passes_its_own_cpp_row_as_the_reference(tmp_path, monkeypatch):
    """With 1x3x224x224 measured, the section reuses that package and its AOTI-C++ row,
    and compiles only the dynamic-batch package (dim 0 from 1 to MAX_BATCH)."""
    import aoti_deploy.bench.benchmark as benchmark_stage
    from aoti_deploy.bench.benchmark import SizeResult

    row = Latency(23.0, 24.0, 27.0, 200)
    report = BenchReport({"cpu": "test", "cores": "2"}, "test", 0.1, True, 3)
    report.sizes.append(SizeResult("1x3x224x224", (1, 3, 224, 224), 0.6, {"AOTI-C++": row}, "retain", 2, 2, 0))
    builds, calls = [], {}
    monkeypatch.setattr(triton_stage, "triton_unavailable_reason", lambda runner=None: None)
    monkeypatch.setattr(triton_stage, "resolve_backend_dir", lambda runner=None: tmp_path / "backends")
    monkeypatch.setattr(benchmark_stage, "export_and_compile",
                        lambda source, options, output: builds.append((source, output)) or output)
    monkeypatch.setattr(benchmark_stage, "require_verified", lambda output, what: output)
    monkeypatch.setattr(triton_stage, "measure_triton", lambda *args, **kwargs: calls.update(args=args, **kwargs))
    benchmark_stage._measure_triton(tmp_path, tmp_path / "aoti_runner", tmp_path / "lib.so", True, lambda name: None,
                                    report)
    ((source, output),) = builds
    assert source.dynamic == ("batch",) and source.ranges["batch"] == (1, triton_stage.MAX_BATCH)
    assert source.shape() == (1, 3, 224, 224)
    work_dir, package, dynamic = calls["args"][:3]
    assert package == tmp_path / "model_1x3x224x224.pt2" and dynamic == output
    assert calls["in_process"].latency is row and calls["in_process"].intra_op_threads == 2
    # --iterations 0.1: 50 requests per latency run, 0.5 s per throughput run.
    assert calls["requests"] == 50 and calls["seconds"] == pytest.approx(0.5)
