"""The performance work, for correctness only (no timing assertions): the export-time
optimization keeps every bit in both runtimes, the C++ runner's benchmark and serving
modes check every output, the benchmark command writes valid JSON, Markdown and a
PNG, and the compile cache hits and misses on each component of its key."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import PACKAGE_SHAPE, run_cli, run_cmd
import aoti_deploy
import aoti_deploy.bench.benchmark as benchmark_stage
import aoti_deploy.bench.benchmark_report as benchmark_report
from aoti_deploy.compiler.cache import cache_key
from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.cli.run_inference import app as run_inference_app
from aoti_deploy.models.identity import IdentityModel
from aoti_deploy.compiler.optimize import optimize_program
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import CLOSE, Tolerance
from aoti_deploy.verify.special_values import INT_TWIN, special_values
from aoti_deploy.runtime.tensor_files import load_tensors, save_tensors

runner = CliRunner()


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    twin = INT_TWIN[a.dtype]
    return a.shape == b.shape and torch.equal(a.view(twin), b.view(twin))


@pytest.fixture(scope="session")
def unoptimized_package(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> Path:
    """The compiled_package's model and shape, compiled with --no-optimize."""
    package = tmp_path_factory.mktemp("unoptimized") / "model.pt2"
    batch, channels, height, width = PACKAGE_SHAPE
    result = runner.invoke(export_compile_app, [
        "--batch", str(batch), "--channels", str(channels), "--height", str(height), "--width", str(width),
        "--output", str(package), "--op-lib", str(op_library), "--no-optimize", "--no-show-graph"])
    assert result.exit_code == 0, result.output
    return package


# --- the optimization ------------------------------------------------------------------

def test_optimized_package_records_and_shows_the_rewrite(compiled_package, unoptimized_package):
    assert "2 pointwise conv(s) lowered to a multiply" in read_package_spec(compiled_package.path).optimizations
    assert read_package_spec(unoptimized_package).optimizations.startswith("off (--no-optimize);")
    # The exported graph printed by the CLI: no conv left, a multiply in its place.
    graph = compiled_package.cli_output.split("exported graph")[1]
    assert "aten.conv2d" not in graph and "aten.mul.Tensor" in graph


@pytest.mark.parametrize("kind", ["random", "special"])
def test_optimized_and_unoptimized_packages_keep_eager_bits_in_both_runtimes(
    compiled_package, unoptimized_package, build, op_library, tmp_path, kind
):
    """Both packages give eager's bits in Python and in C++, special values included:
    the rewrite keeps the conv's -0.0 -> +0.0 and NaN quieting (torch 2.14's Inductor
    dropped an earlier form's `+ 0.0`; this test is what caught it)."""
    x = torch.randn(PACKAGE_SHAPE) if kind == "random" else special_values(PACKAGE_SHAPE, torch.float32)
    with torch.no_grad():
        eager = IdentityModel(PACKAGE_SHAPE[1]).eval()(x)
    inputs = save_tensors(tmp_path / "in.pt", [x])
    expected = save_tensors(tmp_path / "eager.pt", [eager])
    for package in (compiled_package.path, unoptimized_package):
        # --expected eager: exit 0 only if every bit is eager's.
        py = runner.invoke(run_inference_app, [str(package), str(op_library), "--inputs", str(inputs),
                                                "--expected", str(expected), "--outputs", str(tmp_path / "py.pt")])
        cpp = run_cmd(build.runner, package, op_library, "--inputs", inputs, "--expected", expected,
                      "--outputs", tmp_path / "cpp.pt")
        assert py.exit_code == 0, py.output
        assert cpp.returncode == 0, cpp.stdout + cpp.stderr
        assert _same_bits(load_tensors(tmp_path / "py.pt")[0], load_tensors(tmp_path / "cpp.pt")[0])
    if kind == "special":
        negative_zero = (x.view(torch.int32) == torch.iinfo(torch.int32).min)
        assert negative_zero.any()
        # Pinned: -0.0 still comes out as +0.0, as from the conv.
        assert (eager.view(torch.int32)[negative_zero] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_rewrite_is_applied_only_where_the_probe_shows_the_same_bits(op_library, dtype):
    model = IdentityModel(3).to(dtype).eval()
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(2, 3, 4, 4).to(dtype),), strict=False)
    report = optimize_program(program)
    targets = [str(node.target) for node in program.graph.nodes if node.op == "call_function"]
    if dtype == torch.bfloat16:
        # The bfloat16 conv flushes subnormals; a multiply would not, so it stays a conv.
        assert report.lowered == [] and len(report.kept) == 2 and "probe values" in report.kept[0]
        assert targets.count("aten.conv2d.default") == 2
    else:
        assert len(report.lowered) == 2 and report.kept == []
        assert "aten.conv2d.default" not in targets and targets.count("aten.mul.Tensor") == 2
        with torch.no_grad():
            x = special_values((2, 3, 4, 4), dtype)
            assert _same_bits(program.module()(x), model(x))


class _ScaleConv(torch.nn.Module):
    """One pointwise depthwise conv with the given per-channel weights, as the output."""

    def __init__(self, weights: list[float]) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(len(weights), len(weights), 1, groups=len(weights), bias=False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.tensor(weights).view(-1, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.mark.parametrize("weights", [[1.0] * 8, [1.0] * 7 + [-0.5], [0.37, -1.5, 2.0, -0.001, 3e-39, 1.0, -1.0, 0.5]])
def test_optimized_program_keeps_eager_bits_for_any_weights(weights):
    """Whatever the probe decides, the program after optimize_program gives eager's
    bits on special values in every channel (the conv may fuse multiply and add,
    which a multiply-plus-zero does not, where a product rounds to zero)."""
    model = _ScaleConv(weights).eval()
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(2, len(weights), 8, 16),), strict=False)
    report = optimize_program(program)
    assert len(report.lowered) + len(report.kept) == 1
    # The conv was the graph output: the signature names the node that replaced it.
    (output_spec,) = program.graph_signature.output_specs
    assert output_spec.arg.name in {node.name for node in program.graph.nodes}
    x = torch.stack([special_values((2, 8, 16), torch.float32, seed=100 + c) for c in range(len(weights))], dim=1)
    with torch.no_grad():
        assert _same_bits(program.module()(x), model(x))
    if weights == [1.0] * 8:
        assert report.lowered, report.summary()


def test_a_bare_multiply_would_change_special_values():
    """Why the rewrite maps zeros to +0.0: without it, -0.0 would survive where the
    conv makes +0.0, and the probe must (and does) see the difference."""
    from aoti_deploy.compiler.optimize import _positive_zero

    x = special_values((1, 3, 4, 4), torch.float32)
    weight = torch.ones(3, 1, 1, 1)
    conv = torch.nn.functional.conv2d(x, weight, groups=3)
    bare = x * weight.view(1, 3, 1, 1)
    assert not _same_bits(conv, bare)
    assert _same_bits(conv, _positive_zero(bare))


# --- the C++ runner's benchmark and serving modes ----------------------------------------

def test_runner_bench_checks_every_output_from_two_threads(compiled_package, build, op_library, tmp_path):
    out = tmp_path / "bench.json"
    result = run_cmd(build.runner, compiled_package.path, op_library, "--inputs", compiled_package.input_file,
                     "--bench", "25", "--warmup", "2", "--threads", "2", "--pin-threads", "--bench-json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text(), parse_constant=lambda constant: pytest.fail(f"not JSON: {constant}"))
    assert data["threads"] == 2 and data["pinned"] is True
    assert data["minor_page_faults"] >= 0 and data["rss_after_warmup_kib"] > 0 and data["iterations"] == 25 and data["intra_op_threads"] >= 1
    assert data["outputs_checked"] == 50 and data["mismatched_outputs"] == 0
    assert data["p50_us"] <= data["p90_us"] <= data["p99_us"] and len(data["per_thread_p50_us"]) == 2
    assert data["floor_p50_us"] > 0 and data["throughput_per_s"] > 0 and data["malloc"] == "retain"
    assert data["rss_start_kib"] > 0 and data["rss_end_kib"] > 0
    assert "bench: allocator: glibc malloc, retain" in result.stdout
    # An identity package keeps the 4-copy floor, and the report says it is that one.
    assert data["floor"] == "identity: 4 copies"
    assert "bench: floor (4 copy_ into existing buffers, this process) p50 " in result.stdout
    # The bench's outputs still go through the usual identity verification.
    assert "verify: output[0] vs input[0] (bitwise): identical" in result.stdout and "PASSED" in result.stdout


def test_runner_bench_says_page_faults_are_counted_for_the_whole_process(compiled_package, build, op_library):
    """The count is the process's (getrusage RUSAGE_SELF) over the timed region, so the
    intra-op workers' faults are in it; the report must say so, not "all threads" of
    a per-thread count."""
    result = run_cmd(build.runner, compiled_package.path, op_library, "--bench", "10", "--warmup", "1",
                     "--threads", "2", "--intra-op-threads", "2", "--malloc", "system")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "page faults" in line]
    assert line.startswith("bench: minor page faults in the timed region, whole process: "), line
    assert "RUSAGE_SELF" in line and "intra-op workers included" in line, line
    data = json.loads(result.stdout.split("bench json: ", 1)[1].splitlines()[0])
    assert data["minor_page_faults"] >= 0 and data["page_faults_counted"] == "whole process, timed region"


def test_runner_bench_floor_of_a_non_identity_package(scale_shift, build, tmp_path):
    """Two inputs, two outputs: the floor copies each of them once (not the first
    input four times, which means nothing for this model), and says so."""
    out = tmp_path / "bench.json"
    result = run_cmd(build.runner, scale_shift.path, "--inputs", scale_shift.reference / "inputs.pt",
                     "--bench", "20", "--warmup", "2", "--bench-json", out)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("bench: floor")]
    assert line.startswith("bench: floor (each of the 2 input(s) and 2 output(s) copied once with copy_ into "
                           "existing buffers, this process) p50 "), line
    assert "4 copy_" not in result.stdout
    data = json.loads(out.read_text())
    assert data["floor"] == "inputs and outputs: each copied once" and data["floor_p50_us"] > 0
    assert data["outputs_checked"] == 20 and data["mismatched_outputs"] == 0


def test_runner_soak_prints_rss_at_start_and_end(compiled_package, build, op_library):
    result = run_cmd(build.runner, compiled_package.path, op_library, "--iterations", "30", "--warmup", "0",
                     "--malloc", "system")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bench: RSS " in result.stdout and "KiB at start" in result.stdout and "KiB at end" in result.stdout
    assert "system defaults" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bench", "0"], "--bench expects an integer in [1,"),
        (["--bench", "5", "--threads", "0"], "--threads expects an integer in [1, 256]"),
        (["--bench", "5", "--threads", "x"], "--threads expects a non-negative integer, got 'x'"),
        (["--malloc", "jemalloc"], "--malloc expects 'retain' or 'system', got 'jemalloc'"),
        (["--bench", "5", "--intra-op-threads", "0"], "--intra-op-threads expects an integer in [1, 1024]"),
    ],
)
def test_runner_bench_options_are_checked(compiled_package, build, op_library, args, message):
    result = run_cmd(build.runner, compiled_package.path, op_library, *args)
    assert result.returncode == 2 and message in result.stderr, result.stdout + result.stderr


# --- the benchmark command --------------------------------------------------------------

def test_benchmark_tiny_run_writes_json_markdown_and_png(build, op_library, tmp_path):
    result = runner.invoke(cli_app, [
        "bench",
        "--sizes", "1x3x16x16", "--iterations", "0.02", "--bandwidth-mb", "2", "--no-signing", "--no-cold-start",
        "--no-compile-time", "--no-triton", "--cpu-targets", "x86-64-v2", "--output-dir", str(tmp_path),
        "--runner", str(build.runner), "--op-lib", str(op_library)])
    assert result.exit_code == 0, result.output
    def reject(constant: str) -> None:
        raise AssertionError(f"bench.json holds {constant}, which is not JSON")

    data = json.loads((tmp_path / "bench.json").read_text(), parse_constant=reject)
    (size,) = data["sizes"]
    assert size["shape"] == [1, 3, 16, 16]
    from aoti_deploy.runtime.onnx_extra import missing_onnx_packages

    # The ONNX path is measured by default whenever the ONNX extra is installed.
    onnx = [] if missing_onnx_packages() else ["ONNX (onnxruntime)"]
    assert list(size["latencies"]) == ["eager", "torch.compile", "AOTI-Python", "AOTI-C++", "AOTI-C++ x86-64-v2",
                                       *onnx, "floor: 4 copies"]
    assert data["cpu_targets"] == ["x86-64-v2"]
    for latency in size["latencies"].values():
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] and latency["runs"] >= 3
    assert size["ratio_to_floor"]["floor: 4 copies"] == 1.0
    assert data["serving"]["mismatched_outputs"] == 0 and data["serving"]["scaling"] > 0
    assert data["bandwidth"]["kernel_gb_s"] > 0 and data["bandwidth"]["clone_gb_s"] > 0
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (tmp_path / "bench.md").read_text()
    assert "| 1x3x16x16 | AOTI-C++ |" in markdown and "| target | measured | met |" in markdown
    assert "| 1x3x16x16 | AOTI-C++ x86-64-v2 |" in markdown
    assert all(f"| 1x3x16x16 | {path} |" in markdown for path in onnx)
    assert "performance targets, as measured in this run" in result.output


def test_benchmark_refuses_a_package_that_failed_verification(compiled_package, build, op_library, tmp_path,
                                                              monkeypatch):
    """A package whose bits differ from eager's is never timed: the stage raises a
    VerificationError (exit 1) right after the build. The real build runs (a cache hit
    on a copy of the session's package, so nothing compiles); only its checks are
    turned into a failure, and the stage's own `passed` check must catch it."""
    real_build = benchmark_stage.export_and_compile
    builds = []

    def build_that_failed_verification(config, *args, **kwargs):
        result = real_build(config, *args, **kwargs)
        builds.append(result)
        label, comparison = result.checks[0]
        bits = dataclasses.replace(comparison.bits, identical=False, num_differ=1, first_index=(0, 0, 0, 0))
        differ = dataclasses.replace(comparison, bits=bits, num_outside=1)
        return dataclasses.replace(result, checks=[(label, differ), *result.checks[1:]])

    monkeypatch.setattr(benchmark_stage, "export_and_compile", build_that_failed_verification)
    monkeypatch.setattr(benchmark_stage, "time_calls", lambda *args: pytest.fail("a failed package was timed"))
    name = "x".join(str(n) for n in PACKAGE_SHAPE)
    shutil.copy(compiled_package.path, tmp_path / f"model_{name}.pt2")
    result = runner.invoke(cli_app, [
        "bench",
        "--sizes", name, "--iterations", "0.01", "--repeats", "1", "--no-serving", "--bandwidth-mb", "0",
        "--no-onnx", "--no-signing", "--output-dir", str(tmp_path), "--runner", str(build.runner), "--op-lib",
        str(op_library)])
    assert result.exit_code == 1, result.output
    assert "failed verification against eager, so it is not benchmarked" in result.output
    assert "1 of" in result.output and "elements differ" in result.output
    assert [b.cached for b in builds] == [True]
    assert not (tmp_path / "bench.json").exists()


def test_benchmark_rejects_an_unknown_size(build, tmp_path):
    """From a folder with no build/ and no --runner or --op-lib: the size is checked
    only after the runner and the op library were found in this checkout's build."""
    from conftest import run_cli

    result = run_cli("aoti-deploy", "bench", "--sizes", "huge", "--output-dir", tmp_path, cwd=tmp_path, build=build)
    assert result.returncode == 2 and "unknown size 'huge'" in result.stderr, result.stdout + result.stderr


# --- the compile cache ------------------------------------------------------------------

def _key(model, **changes):
    args = dict(
        model=model, example_inputs=[torch.zeros(2, 3, 4, 4)], traced_inputs=[torch.zeros(2, 3, 4, 4)],
        library_paths=[], source_modules=[], options={"device": "cpu", "optimize": True}, cpu_flags=["avx2"],
    )
    args.update(changes)
    return cache_key(**args)


def test_cache_key_changes_with_each_component(op_library, tmp_path, monkeypatch):
    model = IdentityModel(3).eval()
    base = _key(model)
    assert _key(IdentityModel(3).eval()) == base  # same inputs, same key
    changed = IdentityModel(3).eval()
    with torch.no_grad():
        changed.layer4.weight.fill_(2.0)
    assert _key(changed) != base, "model state"
    other_class = IdentityModel(3).eval()
    other_class.layer2 = torch.classes.my_ops.IdentityConvClass(5)
    assert _key(other_class) != base, "torchbind state"
    buffered = IdentityModel(3).eval()
    buffered.register_buffer("offset", torch.zeros(3), persistent=False)
    with_buffer = _key(buffered)
    buffered.offset.fill_(1.0)
    assert with_buffer != base and _key(buffered) != with_buffer, "non-persistent buffer"
    constant = IdentityModel(3).eval()
    constant.scale = torch.ones(3)  # a plain tensor attribute: export lifts it as a constant
    with_constant = _key(constant)
    constant.scale = torch.full((3,), 2.0)
    assert with_constant != base and _key(constant) != with_constant, "tensor constant"
    assert _key(model, example_inputs=[torch.zeros(2, 3, 4, 5)]) != base, "shapes"
    assert _key(model, example_inputs=[torch.zeros(2, 3, 4, 4, dtype=torch.float64)]) != base, "dtype"
    assert _key(model, options={"device": "cuda", "optimize": True}) != base, "device"
    assert _key(model, options={"device": "cpu", "optimize": False}) != base, "options"
    assert _key(model, cpu_flags=["avx512f"]) != base, "host ISA"
    library = tmp_path / "libfake.so"
    library.write_bytes(b"one")
    with_library = _key(model, library_paths=[library])
    assert with_library != base
    library.write_bytes(b"two")
    assert _key(model, library_paths=[library]) != with_library, "op library content"
    source = tmp_path / "user_model_for_key.py"
    source.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import user_model_for_key  # noqa: F401

    with_source = _key(model, source_modules=["user_model_for_key"])
    source.write_text("X = 2\n")
    assert _key(model, source_modules=["user_model_for_key"]) != with_source, "model source"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert _key(model) == base, "a cache location changes no code"
    monkeypatch.setenv("TORCHINDUCTOR_MAX_AUTOTUNE", "1")
    assert _key(model) != base, "Inductor settings"
    monkeypatch.delenv("TORCHINDUCTOR_MAX_AUTOTUNE")
    monkeypatch.setattr(torch, "__version__", "0.0.0-test")
    assert _key(model) != base, "torch version"


def test_the_cache_key_of_a_cpu_package_counts_its_thread_count(tmp_path):
    """A CPU package's weights are laid out for its intra-op thread count (the export's
    ``threads``, else this process's), so each count is its own package; an ONNX file's
    key does not count it."""
    from aoti_deploy.compiler.cache import build_cache_key
    from aoti_deploy.compiler.options import ExportOptions
    from aoti_deploy.models.example import given_example
    from aoti_deploy.models.call import CallInputs

    example = given_example(torch.nn.Linear(4, 2), CallInputs((torch.zeros(1, 4),)), "cpu")

    def key(**values):
        return build_cache_key(example, ExportOptions(**values), [], None)

    threads = torch.get_num_threads()
    assert key() == key(threads=threads)
    assert key(threads=threads + 1) != key()
    try:
        torch.set_num_threads(threads + 1)
        assert key() == key(threads=threads + 1)
    finally:
        torch.set_num_threads(threads)
    assert ExportOptions(target="onnx").intra_op_threads() == 0 == ExportOptions(device="cuda").intra_op_threads()
    from aoti_deploy.errors import InputError

    with pytest.raises(InputError, match="but this export's target is pt2 on cuda; leave threads out"):
        ExportOptions(threads=2, device="cuda").validate(tmp_path / "x.pt2")


def test_cache_key_changes_with_the_toolkits_own_sources(tmp_path, monkeypatch):
    """What a package records is the toolkit's doing (e.g. its outputs, which packages
    from before lack): a toolkit that records more must miss on their keys, so a hit
    never hands back a spec that a fresh build would record differently."""
    from aoti_deploy.compiler import cache

    toolkit = tmp_path / "aoti_deploy"
    toolkit.mkdir()
    (toolkit / "spec.py").write_text("OUTPUTS = False\n")
    monkeypatch.setattr(cache, "_TOOLKIT_DIR", toolkit)
    model = torch.nn.Identity()
    before = _key(model)
    (toolkit / "spec.py").write_text("OUTPUTS = True\n")
    assert _key(model) != before


def test_export_compile_reuses_an_identical_build_and_force_rebuilds(compiled_package, op_library, tmp_path):
    """The session's package was built by the same arguments: a hit, with the stored
    checks and the file untouched. --force, or a changed option, rebuilds."""
    batch, channels, height, width = PACKAGE_SHAPE
    args = ["--batch", str(batch), "--channels", str(channels), "--height", str(height), "--width", str(width),
            "--output", str(compiled_package.path), "--op-lib", str(op_library)]
    before = compiled_package.path.read_bytes()
    hit = runner.invoke(export_compile_app, args)
    assert hit.exit_code == 0, hit.output
    assert "cached: the package at --output was built from the same inputs" in hit.output
    assert re.search(r"eager vs package \[2, 3, 8, 12\] \(bitwise\)\s*│ identical", hit.output), hit.output
    assert "PASSED (bit-identical)" in hit.output
    assert compiled_package.path.read_bytes() == before

    copy = tmp_path / "model.pt2"
    copy.write_bytes(before)
    args[args.index("--output") + 1] = str(copy)
    assert "cached:" in runner.invoke(export_compile_app, args).output  # the key is in the file, not the path
    forced = runner.invoke(export_compile_app, args + ["--force", "--no-show-graph"])
    assert forced.exit_code == 0 and "built (key recorded in the package)" in forced.output, forced.output
    changed = runner.invoke(export_compile_app, args + ["--seed", "3", "--no-show-graph"])
    assert changed.exit_code == 0 and "built (key recorded in the package)" in changed.output, changed.output
    assert read_package_spec(copy).cache_key != read_package_spec(compiled_package.path).cache_key


def test_cache_key_is_the_library_content_not_its_spelling(tmp_path, monkeypatch):
    model = torch.nn.Identity()
    library = tmp_path / "build" / "libfake.so"
    library.parent.mkdir()
    library.write_bytes(b"one")
    monkeypatch.chdir(tmp_path)
    spellings = [library, Path("build/libfake.so"), Path("./build/libfake.so")]
    assert len({_key(model, library_paths=[path]) for path in spellings}) == 1


def test_cache_key_covers_the_example_input_values():
    model = torch.nn.Identity()
    zeros = _key(model, example_inputs=[torch.zeros(2, 3, 4, 4)])
    random = _key(model, example_inputs=[torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))])
    assert zeros != random


def test_a_check_only_option_reuses_the_compiled_code(compiled_package, op_library, tmp_path):
    """A tolerance changes the check, not the compiled code: the package is verified
    again under the new rule, without export or compile, and records that rule."""
    batch, channels, height, width = PACKAGE_SHAPE
    copy = tmp_path / "model.pt2"
    shutil.copy(compiled_package.path, copy)
    args = ["--batch", str(batch), "--channels", str(channels), "--height", str(height), "--width", str(width),
            "--output", str(copy), "--op-lib", str(op_library), "--rtol", "0.001", "--atol", "0.0001"]
    hit = runner.invoke(export_compile_app, args)
    assert hit.exit_code == 0 and "cached: the same compiled code, verified again" in hit.output, hit.output
    assert re.search(r"eager vs package \[2, 3, 8, 12\] \(rtol 0\.001, atol 0\.0001\)\s*│ identical", hit.output)
    assert read_package_spec(copy).eager_check == Tolerance(CLOSE, rtol=0.001, atol=0.0001)
    assert read_package_spec(copy).cache_key == read_package_spec(compiled_package.path).cache_key
    again = runner.invoke(export_compile_app, args)
    assert "cached: the package at --output was built from the same inputs" in again.output, again.output


def test_a_failed_build_leaves_the_output_untouched_and_uncached(tmp_path, monkeypatch):
    """A model whose compiled code cannot match eager (it draws fresh noise): exit 1,
    the file already at --output keeps its bytes, and no temporary file is left."""
    (tmp_path / "noisy_model_for_cache.py").write_text(
        "import torch\n\n\nclass Noisy(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.rand_like(x)\n\n\n"
        "def build():\n    return Noisy()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "out" / "model.pt2"
    output.parent.mkdir()
    output.write_bytes(b"the previous, good package")
    result = runner.invoke(
        export_compile_app,
        ["--model", "noisy_model_for_cache:build", "--input-shape", "2,3", "--output", str(output), "--no-show-graph"],
    )
    assert result.exit_code == 1, result.output
    assert "FAILED" in result.output and "untouched" in result.output, result.output
    assert output.read_bytes() == b"the previous, good package"
    assert sorted(p.name for p in output.parent.iterdir()) == ["model.pt2"]


def test_cache_key_of_an_installed_library_reads_its_record_not_every_file():
    """A model class from an installed distribution (here numpy's top-level package
    stands in for a large model library) is keyed by the distribution's RECORD, which
    pip writes with every file's sha256, instead of hashing each of its files."""
    import numpy  # noqa: F401

    from aoti_deploy.compiler.cache import _source_digests

    class FromInstalledLibrary(torch.nn.Module):
        pass

    FromInstalledLibrary.__module__ = "numpy"
    digests = _source_digests(FromInstalledLibrary(), [])
    assert "installed numpy" in digests
    assert not any("site-packages" in key for key in digests), "no file of numpy is hashed one by one"


def test_runner_bench_chooses_intra_op_threads_by_timing_the_package(compiled_package, build, op_library):
    """Not by the input's size: with more than one core per serving thread, the package
    is timed at 1 and at cores / threads intra-op threads and the faster is kept; the
    report says which and why. --intra-op-threads overrides it."""
    import os
    import re

    def bench(*args: str) -> tuple[str, dict]:
        result = run_cmd(build.runner, compiled_package.path, op_library, "--bench", "5", "--warmup", "12", *args)
        assert result.returncode == 0, result.stdout + result.stderr
        (line,) = [line for line in result.stdout.splitlines() if line.startswith("bench: intra-op threads ")]
        return line, json.loads(result.stdout.split("bench json: ", 1)[1].splitlines()[0])

    cores = os.cpu_count() or 1
    line, data = bench()
    if cores >= 2:
        trial = {int(k): v for k, v in data["intra_op_trial_p50_us"].items()}
        assert set(trial) == {1, cores}, data
        assert re.search(rf"1 thread p50 [\d.]+ us, {cores} threads \(cores / serving threads\) p50 [\d.]+ us", line), line
        if trial[1] != trial[cores]:
            assert data["intra_op_threads"] == (cores if trial[cores] < trial[1] else 1), data
        assert line.startswith(f"bench: intra-op threads {data['intra_op_threads']}: the faster, timed before"), line
    else:
        assert data["intra_op_threads"] == 1 and "nothing to choose from" in line, line
    line, data = bench("--threads", str(cores))
    assert data["intra_op_threads"] == 1 and data["intra_op_trial_p50_us"] == {}, data
    assert line == f"bench: intra-op threads 1: cores / serving threads = {cores} / {cores}, so 1: nothing to choose from"
    line, data = bench("--intra-op-threads", "3")
    assert data["intra_op_threads"] == 3 and line == "bench: intra-op threads 3: set with --intra-op-threads"


# --- the compile-time section and the CPU-target rows -----------------------------------

def _compile_times(toolkit_s: float, baseline_s: float, warm_s: float):
    from aoti_deploy.bench.compile_time import CompileRun, CompileTimes

    toolkit = CompileRun(9.0, 1.5, toolkit_s, {"export": 1.0, "compile": toolkit_s - 1.0})
    baseline = CompileRun(9.0, 1.5, baseline_s, {"export": 1.0, "compile": baseline_s - 1.0})
    return CompileTimes(3, 6.0, baseline, toolkit, toolkit, warm_s, 2)


@pytest.mark.parametrize("toolkit_s, baseline_s, warm_s, met", [
    (7.0, 7.5, 1.5, [True, True]),
    (9.0, 7.5, 2.5, [False, False]),  # 1.2x and a slow cache hit
    (8.6, 7.5, 2.0, [True, True]),  # 1.147x: just within
])
def test_compile_section_targets_and_markdown(toolkit_s, baseline_s, warm_s, met):
    report = benchmark_stage.BenchReport({"cpu": "test", "cores": "2"}, "2.13.0", 1.0, True, 1)
    report.compile_time = _compile_times(toolkit_s, baseline_s, warm_s)
    found = [t for t in benchmark_report.targets(report) if t.name.startswith("compile:")]
    assert [t.met for t in found] == met
    assert report.to_json()["compile_time"]["cold_ratio"] == pytest.approx(toolkit_s / baseline_s)
    markdown = benchmark_report.markdown_table(report)
    assert f"| export_compile | {toolkit_s:.2f} | 1.50 | 9.00 | export 1.00, compile {toolkit_s - 1:.2f} |" in markdown
    assert f"| export_compile, warm (cache hit) |  |  | {warm_s:.2f} |  |" in markdown
    assert f"| export_compile / plain, after imports | {toolkit_s / baseline_s:.2f}x |" in markdown


def test_benchmark_cpu_targets_option(build, tmp_path):
    from aoti_deploy.cli.benchmark import _cpu_targets

    assert _cpu_targets("none") == []
    assert _cpu_targets("x86-64-v2, x86-64-v2") == ["x86-64-v2"]
    result = run_cli("aoti-deploy", "bench", "--cpu-targets", "x86-64-v9", "--output-dir", tmp_path, cwd=tmp_path,
                     build=build)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown target 'x86-64-v9'" in result.stdout + result.stderr


# --- the package benchmark (bench --package) -----------------------------------------

def test_package_benchmark_of_a_package_static_in_batch_says_so(compiled_package, tmp_path) -> None:
    """A package static in batch (the session's demo package, batch 2) measures only
    the batches it takes, without a model only its own paths, and writes JSON,
    Markdown and a PNG."""
    from aoti_deploy.bench.package_bench import EAGER, PYTHON, write_outputs

    package = aoti_deploy.load(compiled_package.path)
    result = package.benchmark(compiled_package.inputs[0], iterations=2, warmup=0, batches=(1, 2), cpp=False)
    assert result.batches == (1, 2) and {row.batch for row in result.rows} == {2}
    assert any("batch 1: the package is not dynamic in batch" in note for note in result.notes)
    assert "no eager model" in result.row(EAGER, 2).skipped and result.row(PYTHON, 2).p50_ratio == 1.0
    json_path, md_path, png_path = write_outputs(result, tmp_path)
    assert json.loads(json_path.read_text())["rows"][0]["batch"] == 2
    assert "| 2 | AOTI Python runtime |" in md_path.read_text()
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_package_benchmark_in_rounds_times_the_paths_in_turn_and_reports_medians(compiled_package, build) -> None:
    """rounds=3: every path once per round, the paths in turn within each round (the
    progress steps say so, in order); each row's p50 is the median of its three
    rounds', which the row keeps; the result says how it was timed."""
    from aoti_deploy.bench.package_bench import PYTHON, TRITON, cpp_row

    package = aoti_deploy.load(compiled_package.path)
    steps: list[str] = []
    result = package.benchmark(compiled_package.inputs[0], iterations=3, warmup=1, batches=(2,), threads=1,
                               rounds=3, on_step=steps.append)
    paths = [PYTHON, cpp_row(1)]
    assert steps == [f"batch 2: {path}, round {k}/3" for k in (1, 2, 3) for path in paths]
    for path in paths:
        row = result.row(path, 2)
        assert len(row.round_p50s_us) == 3 and all(p50 > 0 for p50 in row.round_p50s_us)
        assert row.p50_us == statistics.median(row.round_p50s_us)
    assert result.to_json()["rounds"] == 3 and "in each of 3 rounds, the paths in turn" in result.markdown()
    single = package.benchmark(compiled_package.inputs[0], iterations=2, warmup=0, batches=(2,), cpp=False,
                               triton=True)
    assert single.rounds == 1 and single.row(PYTHON, 2).round_p50s_us == () and "rounds" not in single.markdown()
    assert "not timed for a package" in single.row(TRITON, 2).skipped
    with pytest.raises(aoti_deploy.InputError, match=r"rounds >= 1 \(given 0\)"):
        package.benchmark(compiled_package.inputs[0], iterations=2, rounds=0, cpp=False)


def test_package_benchmark_in_rounds_compiles_each_torch_compile_mode_once(compiled_package) -> None:
    """With an eager model given (a pointwise one: a graph each, nothing to tune) and
    both torch.compile rows, three rounds compile each mode once (Dynamo keeps both,
    guarded on the backend), and each row's note is that first call's compile time,
    not a later round's warm call."""
    from torch._dynamo.utils import counters

    from aoti_deploy.bench.package_bench import COMPILE, COMPILE_MAX

    class Pointwise(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 + 1

    package = aoti_deploy.load(compiled_package.path)
    counters.clear()
    result = package.benchmark(compiled_package.inputs[0], model=Pointwise(), iterations=2, warmup=1,
                               batches=(PACKAGE_SHAPE[0],), threads=1, rounds=3, cpp=False, onnx=False)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    for path in (COMPILE, COMPILE_MAX):
        row = result.row(path, PACKAGE_SHAPE[0])
        assert not row.skipped and len(row.round_p50s_us) == 3, row
        assert re.fullmatch(r"first call \(compile\) \d+\.\d s", row.note), row.note


def test_bench_package_cli_measures_a_package_and_writes_its_files(compiled_package, build, tmp_path):
    result = runner.invoke(cli_app, [
        "bench", "--package", str(compiled_package.path), "--inputs", str(compiled_package.input_file),
        "--batches", "1,2", "--iterations", "0.02", "--no-onnx", "--output-dir", str(tmp_path),
        "--runner", str(build.runner)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [row["path"] for row in data["rows"]] == [
        "eager", "torch.compile", "torch.compile max-autotune", "AOTI Python runtime", "AOTI C++ runner, 1 thread",
        *([f"AOTI C++ runner, {data['threads']} threads"] if data["threads"] > 1 else []), "ONNX Runtime"]
    assert all(row["batch"] == 2 for row in data["rows"])
    assert "batch 1: the package is not dynamic in batch" in result.output
    assert (tmp_path / "bench.png").is_file() and "| 2 | AOTI Python runtime |" in (tmp_path / "bench.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--inputs", "x.pt"], "--inputs need --package"),
    (["--package", "missing.pt2"], "missing.pt2"),
    (["--package", "{package}", "--batches", "0"], "--batches '0'"),
    (["--package", "{package}", "--model", "no_such_module:factory"], "no_such_module"),
])
def test_bench_package_cli_usage_errors_exit_2(compiled_package, args, message):
    args = [a.replace("{package}", str(compiled_package.path)) for a in args]
    result = runner.invoke(cli_app, ["bench", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_bench_help_describes_the_package_benchmark():
    result = runner.invoke(cli_app, ["bench", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for option in ("--package", "--inputs", "--model", "--batches", "--compile-timeout", "--max-autotune"):
        assert option in text
    assert "ONNX Runtime" in text and "ratios to the fastest" in text


class _WholeInputPool(torch.nn.Module):
    """transformers' EfficientNet head: a 1280x1280 average pool over a 7x7 map."""

    def __init__(self, padding: int = 0) -> None:
        super().__init__()
        self.pool = torch.nn.AvgPool2d(1280, ceil_mode=True, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_whole_input_pools_get_the_input_as_window(dtype: torch.dtype) -> None:
    """The window Inductor would loop over in full becomes the input's size; eager's
    bits stay (special values, both layouts)."""
    model = _WholeInputPool().eval()
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(1, 16, 7, 7).to(dtype),))
    report = optimize_program(program)
    pools = [node for node in program.graph.nodes if node.target is torch.ops.aten.avg_pool2d.default]
    assert [node.args[1] for node in pools] == [[7, 7]]
    assert report.pools == [f"{pools[0].name}: 1280x1280 to 7x7"]
    assert "1 whole-input average pool(s) given the input's size as window" in report.summary()
    for layout in (torch.contiguous_format, torch.channels_last):
        x = special_values((1, 16, 7, 7), dtype).contiguous(memory_format=layout)
        with torch.no_grad():
            assert _same_bits(program.module()(x), model(x))


def test_a_padded_or_partial_pool_is_left_alone() -> None:
    with torch.no_grad():
        padded = torch.export.export(_WholeInputPool(padding=1).eval(), (torch.randn(1, 4, 7, 7),))
        partial = torch.export.export(torch.nn.AvgPool2d(3).eval(), (torch.randn(1, 4, 7, 7),))
    for program in (padded, partial):
        assert optimize_program(program).pools == []
