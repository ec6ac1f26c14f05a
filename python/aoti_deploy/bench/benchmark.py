"""The benchmark suite: every runtime of the IdentityModel at several sizes, in one
run, against the memory floor of a 4-layer identity (four copy_ calls into buffers
that exist before timing, measured inside the C++ runner with the package's thread
settings, so no interpreter overhead flatters it). Also the op kernel's bandwidth
against ``clone()``, and the C++ runner's throughput from one and from two serving
threads, and the same package served by Triton (bench/triton.py). Stage functions
only: benchmark_report.py turns the report into JSON, tables, a plot and targets, and
``aoti-deploy bench`` prints them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import AotiDeployError, VerificationError
from ..models.identity import IdentityModel
from ..ops.loader import load_op_library
from ..compiler.options import ExportOptions
from ..compiler.pipeline import export_and_compile
from ..compiler.result import BuildResult
from ..models.example import FactorySource, IdentitySource
from ..runtime.tensor_files import save_tensors
from ..package.host import CPU_TARGETS
from .cold_start import ColdStartResult, measure_cold_start
from .compile_time import CompileTimes, measure_compile_time
from .results import Latency, machine_facts
from .signing import SigningResult
from .timing import median_run, run_cpp_bench, time_calls

if TYPE_CHECKING:  # the Triton section is imported where it runs
    from .triton import TritonBench

# name -> NCHW shape of the float32 input.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "1x3x224x224": (1, 3, 224, 224),  # 0.6 MB
    "32x3x224x224": (32, 3, 224, 224),  # 19 MB
    "1x3x2400x2400": (1, 3, 2400, 2400),  # 69 MB
}
PATHS = ("eager", "torch.compile", "AOTI-Python", "AOTI-C++", "floor: 4 copies")
FLOOR = "floor: 4 copies"
# The C++ runner's name (bench JSON "floor") for the floor that FLOOR reports.
CPP_IDENTITY_FLOOR = "identity: 4 copies"
# The portable ONNX file in onnxruntime, measured when the ONNX extra is installed.
ONNX_PATH = "ONNX (onnxruntime)"
# Timed runs per size at --iterations 1.0; the large sizes are slow enough that fewer
# runs still give stable medians.
BASE_ITERATIONS = {"1x3x224x224": 2000, "32x3x224x224": 200, "1x3x2400x2400": 60}
# The Triton section at --iterations 1.0: timed requests per latency run, and seconds
# per throughput run (6 runs); the whole section stays near half a minute on 2 cores.
TRITON_REQUESTS = 500
TRITON_SECONDS = 2.0


@dataclass
class SizeResult:
    name: str
    shape: tuple[int, ...]
    megabytes: float
    latencies: dict[str, Latency]
    cpp_allocator: str
    cpp_intra_op_threads: int
    python_threads: int
    # Minor page faults of the whole C++ runner process (every thread) over its timed region.
    cpp_page_faults: int
    # Why the runner ran that many intra-op threads (it times the choice, see bench.cpp).
    cpp_intra_op_choice: str = ""

    def ratio_to_floor(self, path: str) -> float:
        return self.latencies[path].p50 / self.latencies[FLOOR].p50


def target_path(cpu_target: str) -> str:
    """The path name of the C++ runner on a package compiled for a portable CPU target."""
    return f"AOTI-C++ {cpu_target}"


def report_paths(report: "BenchReport") -> list[str]:
    """The paths measured in ``report``, in PATHS order, the CPU-target rows after
    AOTI-C++, ONNX before the floor."""
    measured = {path for size in report.sizes for path in size.latencies}
    targets = [target_path(name) for name in CPU_TARGETS]
    return [path for path in (*PATHS[:-1], *targets, ONNX_PATH, FLOOR) if path in measured]


@dataclass
class ServingResult:
    """The C++ runner serving the smallest size from 1 and from 2 threads."""

    shape: tuple[int, ...]
    throughput_1: float
    throughput_2: float
    per_thread_p50_us: list[float]
    mismatched_outputs: int
    rss_start_kib: int
    rss_end_kib: int

    @property
    def scaling(self) -> float:
        return self.throughput_2 / self.throughput_1


@dataclass
class BandwidthResult:
    """The op kernel against clone() on one large tensor, in GB/s (read + write)."""

    megabytes: float
    kernel_gb_s: float
    clone_gb_s: float

    @property
    def ratio(self) -> float:
        return self.kernel_gb_s / self.clone_gb_s


@dataclass
class BenchReport:
    machine: dict[str, str]
    torch_version: str
    iterations_scale: float
    optimize: bool
    repeats: int
    sizes: list[SizeResult] = field(default_factory=list)
    serving: ServingResult | None = None
    bandwidth: BandwidthResult | None = None
    signing: list[SigningResult] = field(default_factory=list)
    cold_start: ColdStartResult | None = None
    compile_time: CompileTimes | None = None
    cpu_targets: list[str] = field(default_factory=list)  # portable targets timed per size
    triton: TritonBench | None = None
    triton_skipped: str = ""  # why the Triton section did not run, when it was wanted

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        for size, result in zip(data["sizes"], self.sizes):
            size["ratio_to_floor"] = {path: result.ratio_to_floor(path) for path in result.latencies}
        if self.serving:
            data["serving"]["scaling"] = self.serving.scaling
        if self.bandwidth:
            data["bandwidth"]["ratio"] = self.bandwidth.ratio
        for entry, result in zip(data["signing"], self.signing):
            entry["cold_start_ratio"] = result.cold_start_ratio
            entry["verification_cost_ms"] = result.verification_cost_ms
            entry["cost_in_hashes"] = result.cost_in_hashes
            entry["floor_in_hashes"] = result.floor_in_hashes
        if self.cold_start:
            data["cold_start"]["ratio"] = self.cold_start.ratio
        if self.compile_time:
            data["compile_time"]["cold_ratio"] = self.compile_time.cold_ratio
        if self.triton:
            data["triton"]["ratios"] = self.triton.ratios()
            for entry, run in zip(data["triton"]["throughput"], self.triton.throughput):
                entry["throughput"] = run.throughput
                entry["per_execution"] = run.per_execution
        return data


def parse_size(name: str) -> tuple[int, int, int, int]:
    """A name from SIZES, or any ``BxCxHxW`` (e.g. ``1x3x16x16``)."""
    if name in SIZES:
        return SIZES[name]
    try:
        shape = tuple(int(part) for part in name.split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise AotiDeployError(f"unknown size {name!r}: give BxCxHxW (e.g. 1x3x16x16) or one of {', '.join(SIZES)}")
    return shape  # type: ignore[return-value]


def require_verified(result: BuildResult, what: str) -> Path:
    """The package of a build that passed its verification against eager.

    Raises:
        VerificationError: the outputs of ``result``'s package differ from eager's;
            timing it would report the speed of a wrong answer.
    """
    if not result.passed:
        failed = "; ".join(f"{label}: {comparison}" for label, comparison in result.checks
                           if not comparison.passed)
        raise VerificationError(f"{what} {result.package_path} failed verification against eager, so it is not "
                                f"benchmarked: {failed or 'no check passed'}")
    return result.package_path


def kernel_bandwidth(megabytes: float, iterations: int, warmup: int) -> BandwidthResult:
    """GB/s (bytes read + written) of identity_conv_op and of clone() on a float32
    tensor of ``megabytes``, each allocating its output as it would in a model. The
    two calls alternate, so both see the same state of the machine."""
    x = torch.randn(int(megabytes * 1e6 / 4))
    nbytes = 2 * x.numel() * x.element_size()
    calls = {"kernel": lambda: torch.ops.my_ops.identity_conv_op(x), "clone": lambda: x.clone()}
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(warmup + iterations):
        for name, call in calls.items():
            start = time.perf_counter_ns()
            call()
            if i >= warmup:
                samples[name].append((time.perf_counter_ns() - start) / 1e3)
    kernel, clone = Latency.of(samples["kernel"]), Latency.of(samples["clone"])
    return BandwidthResult(x.numel() * 4 / 1e6, nbytes / kernel.p50 / 1e3, nbytes / clone.p50 / 1e3)


def run_benchmark(
    sizes: list[str],
    work_dir: Path,
    runner: Path,
    op_lib: Path | None = None,
    iterations_scale: float = 1.0,
    optimize: bool = True,
    serving: bool = True,
    bandwidth_mb: float = 128.0,
    on_step: Callable[[str], None] | None = None,
    repeats: int = 3,
    onnx: bool = False,
    signing: bool = False,
    cold_start: bool = False,
    cpu_targets: list[str] | None = None,
    compile_time: bool = False,
    compile_runs: int = 3,
    triton: bool = False,
) -> BenchReport:
    """Measure every path at every size in this one run.

    Args:
        sizes: names from SIZES.
        work_dir: packages, tensor files and the runner's JSON go here.
        runner: the built aoti_runner.
        op_lib: libidentity_conv_ops.so (default: the loader's search).
        iterations_scale: multiplies BASE_ITERATIONS (e.g. 0.01 for a smoke run).
        optimize: compile packages with export_compile's optimizations.
        serving: also measure the C++ runner's 2-thread throughput.
        bandwidth_mb: size of the kernel-vs-clone tensor (0: skip).
        on_step: called with each step's name as it starts.
        repeats: the compiled paths (AOTI from Python and C++, the floor, serving) are
            measured this many times; the run with the median p50 (or throughput) is
            reported, whole, so one noisy run on a shared machine does not decide.
        onnx: also export a portable ONNX file per size and time it in a bare
            onnxruntime session (needs the ONNX extra).
        signing: also sign the 1x3x224x224 package and a 68 MB one into bundles and
            time their verification and the C++ cold start with it (needs the sign
            extra).
        cold_start: also time whole processes on the 1x3x224x224 package: aoti_runner,
            run_inference, and run_inference --help (see cold_start.py).
        cpu_targets: portable CPU targets (package.host.CPU_TARGETS) to compile each size
            for and time in the C++ runner, beside the native package.
        compile_time: also time a cold export_compile of the demo model against plain
            torch.export + aoti_compile_and_package, and a warm one (see compile_time.py),
            ``compile_runs`` times each.
        triton: also serve the 1x3x224x224 package from one tritonserver and measure
            it against this run's AOTI-C++ p50 (see triton.py). When the triton extra
            or the backend is missing, the report says why (``triton_skipped``) and
            the rest of the run goes on.

    Returns:
        The BenchReport; nothing is printed.

    Raises:
        VerificationError: a package (or ONNX file) built here does not give eager's
            bits; nothing of it is timed.
    """
    step = on_step or (lambda name: None)
    library = load_op_library(op_lib)
    work_dir.mkdir(parents=True, exist_ok=True)
    if repeats < 1:
        raise AotiDeployError(f"--repeats must be >= 1, got {repeats}")
    unknown = [name for name in cpu_targets or [] if name not in CPU_TARGETS]
    if unknown:
        raise AotiDeployError(f"unknown CPU target(s) {', '.join(unknown)}; expected some of {', '.join(CPU_TARGETS)}")
    # In CPU_TARGETS order, as report_paths lists them.
    report = BenchReport(machine_facts(), torch.__version__, iterations_scale, optimize, repeats,
                         cpu_targets=[name for name in CPU_TARGETS if name in (cpu_targets or [])])
    for name in sizes:
        shape = parse_size(name)
        iterations = max(3, int(BASE_ITERATIONS.get(name, 200) * iterations_scale))
        warmup = max(1, iterations // 10)
        step(f"{name}: compile the package")
        batch, channels, height, width = shape
        source = IdentitySource(batch=batch, channels=channels, height=height, width=width)
        options = ExportOptions(op_libraries=[library], optimize=optimize)
        package_path = require_verified(export_and_compile(source, options, work_dir / f"model_{name}.pt2"),
                                        "the package")
        target_packages = {}
        for cpu_target in report.cpu_targets:
            step(f"{name}: compile the package for {cpu_target}")
            target_packages[cpu_target] = require_verified(
                export_and_compile(source, dataclasses.replace(options, cpu_target=cpu_target),
                                   work_dir / f"model_{name}_{cpu_target}.pt2"), f"the {cpu_target} package")
        target_runs: dict[str, list[dict[str, object]]] = {cpu_target: [] for cpu_target in target_packages}
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        inputs = save_tensors(work_dir / f"input_{name}.pt", [x])
        model = IdentityModel(channels).eval()
        latencies: dict[str, Latency] = {}
        with torch.no_grad():
            step(f"{name}: eager")
            latencies["eager"] = time_calls(lambda: model(x), iterations, warmup)
            step(f"{name}: torch.compile")
            compiled = torch.compile(model, fullgraph=True, dynamic=False)
            compiled(x)
            latencies["torch.compile"] = time_calls(lambda: compiled(x), iterations, warmup)
            if onnx:
                step(f"{name}: ONNX in onnxruntime")
                latencies[ONNX_PATH] = _time_onnx(source, options, work_dir / f"model_{name}.onnx", x, iterations, warmup)
            step(f"{name}: AOTI-Python and AOTI-C++ (with the floor), alternating")
            package = torch._inductor.aoti_load_package(str(package_path))
            # Alternated, so a slow phase of a shared host weighs on both alike.
            python_runs, cpp_runs = [], []
            for _ in range(repeats):
                python_runs.append(time_calls(lambda: package(x), iterations, warmup))
                cpp_runs.append(run_cpp_bench(runner, package_path, library, inputs, iterations, warmup))
                for cpu_target, target_package in target_packages.items():  # the same C++ timing, per target
                    target_runs[cpu_target].append(run_cpp_bench(runner, target_package, library, inputs, iterations,
                                                                 warmup))
            latencies["AOTI-Python"] = median_run(python_runs, lambda r: r.p50)
        cpp = median_run(cpp_runs, lambda r: float(r["p50_us"]))
        if cpp.get("floor") != CPP_IDENTITY_FLOOR:
            raise AotiDeployError(f"aoti_runner timed the floor {cpp.get('floor')!r} for {package_path}, not "
                                    f"{CPP_IDENTITY_FLOOR!r}: does the package declare its identity model?")
        latencies["AOTI-C++"] = Latency(cpp["p50_us"], cpp["p90_us"], cpp["p99_us"], int(cpp["outputs_checked"]))
        latencies[FLOOR] = Latency(cpp["floor_p50_us"], cpp["floor_p90_us"], cpp["floor_p99_us"], iterations)
        for cpu_target, runs in target_runs.items():
            best = median_run(runs, lambda r: float(r["p50_us"]))
            latencies[target_path(cpu_target)] = Latency(best["p50_us"], best["p90_us"], best["p99_us"],
                                                         int(best["outputs_checked"]))
        order = (*PATHS[:-1], *map(target_path, report.cpu_targets), ONNX_PATH, FLOOR)
        report.sizes.append(SizeResult(name, shape, x.numel() * 4 / 1e6, {p: latencies[p] for p in order if p in latencies},
                                       str(cpp["malloc"]), int(cpp["intra_op_threads"]), torch.get_num_threads(),
                                       int(cpp["minor_page_faults"]), str(cpp.get("intra_op_choice", ""))))
        torch._dynamo.reset()  # each size compiles afresh, not into dynamo's recompile limit
    if serving and report.sizes:
        smallest = report.sizes[0]
        step(f"{smallest.name}: C++ serving, 1 and 2 threads")
        package_path = work_dir / f"model_{smallest.name}.pt2"
        inputs = work_dir / f"input_{smallest.name}.pt"
        iterations = max(3, int(4 * BASE_ITERATIONS.get(smallest.name, 200) * iterations_scale))
        runs: dict[int, list[dict[str, object]]] = {1: [], 2: []}
        for _ in range(repeats):  # alternated, like the latency runs
            for threads in runs:
                runs[threads].append(run_cpp_bench(runner, package_path, library, inputs, iterations,
                                                   iterations // 10 + 1, threads=threads, intra_op_threads=1))
        one, two = (median_run(runs[t], lambda r: float(r["throughput_per_s"])) for t in (1, 2))
        report.serving = ServingResult(
            smallest.shape, float(one["throughput_per_s"]), float(two["throughput_per_s"]),
            [float(v) for v in two["per_thread_p50_us"]], int(two["mismatched_outputs"]),
            int(two["rss_start_kib"]), int(two["rss_end_kib"]),
        )
    if bandwidth_mb > 0:
        step(f"op kernel vs clone(), {bandwidth_mb:g} MB")
        runs = max(3, int(100 * iterations_scale))
        report.bandwidth = kernel_bandwidth(bandwidth_mb, runs, max(1, runs // 10))
    if signing:
        report.signing = _measure_signing(work_dir, runner, library, optimize, step)
    if cold_start:
        report.cold_start = _measure_cold_start(work_dir, runner, library, optimize, step, report)
    if compile_time:
        step("compile time: cold export_compile vs torch.export + aoti_compile_and_package, then warm")
        report.compile_time = measure_compile_time(work_dir / "compile_time", library, runs=compile_runs)
    if triton:
        _measure_triton(work_dir, runner, library, optimize, step, report)
    return report


def _measure_signing(work_dir: Path, runner: Path, library: Path, optimize: bool,
                     step: Callable[[str], None]) -> list[SigningResult]:
    """The demo package and a 68 MB one, each signed into a bundle, verified and
    cold-started (see signing.py)."""
    from .signing import make_key_pair, measure_bundle

    private_key, public_key = make_key_pair(work_dir / "keys")
    step("signed bundles: compile the demo package and a 68 MB one")
    options = ExportOptions(op_libraries=[library], optimize=optimize)
    demo = require_verified(export_and_compile(IdentitySource(), options, work_dir / "model_1x3x224x224.pt2"),
                            "the package")
    large = require_verified(export_and_compile(FactorySource("aoti_deploy.bench.signing:large_weights_model"),
                                                options, work_dir / "model_large_weights.pt2"), "the package")
    results = []
    for name, package, libraries in [("demo 1x3x224x224", demo, [library]), ("64 MB weight", large, [])]:
        step(f"signed bundles: {name}, verification and cold start")
        results.append(measure_bundle(name.replace(" ", "_"), package, libraries, runner, work_dir, private_key,
                                      public_key))
        results[-1].name = name
    return results


def _measure_cold_start(work_dir: Path, runner: Path, library: Path, optimize: bool,
                        step: Callable[[str], None], report: BenchReport) -> ColdStartResult:
    """Whole-process cold starts on the demo package: this run's 1x3x224x224 package
    when it measured that size, else one compiled here (see cold_start.py)."""
    step("cold start: aoti_runner, run_inference and run_inference --help, whole processes")
    package = work_dir / "model_1x3x224x224.pt2"
    if not any(size.name == "1x3x224x224" for size in report.sizes):
        package = require_verified(export_and_compile(IdentitySource(), ExportOptions(op_libraries=[library],
                                                                                      optimize=optimize), package),
                                   "the package")
    return measure_cold_start(package, library, runner)


def _measure_triton(work_dir: Path, runner: Path, library: Path, optimize: bool,
                    step: Callable[[str], None], report: BenchReport) -> None:
    """The Triton section on the demo package (this run's, when it measured
    1x3x224x224, with that AOTI-C++ row as the in-process reference) and a
    dynamic-batch build of the same model; or, when it cannot run here, why."""
    from .triton import (MAX_BATCH, InProcessReference, measure_triton, resolve_backend_dir,
                         triton_unavailable_reason)

    reason = triton_unavailable_reason(runner)
    if reason:
        report.triton_skipped = reason
        return
    demo = "1x3x224x224"
    shape = SIZES[demo]
    package = work_dir / f"model_{demo}.pt2"
    measured = next((size for size in report.sizes if size.name == demo), None)
    step(f"Triton: compile the demo package with a dynamic batch (1..{MAX_BATCH})")
    batch, channels, height, width = shape
    source = IdentitySource(batch=batch, channels=channels, height=height, width=width)
    options = ExportOptions(op_libraries=[library], optimize=optimize)
    if measured is None:
        package = require_verified(export_and_compile(source, options, package), "the package")
    dynamic_source = dataclasses.replace(source, dynamic=("batch",), ranges={**source.ranges, "batch": (1, MAX_BATCH)})
    dynamic = require_verified(export_and_compile(dynamic_source, options,
                                                  work_dir / f"model_{demo}_batch_1-{MAX_BATCH}.pt2"),
                               "the dynamic-batch package")
    reference = None
    if measured is not None:
        reference = InProcessReference(measured.latencies["AOTI-C++"], f"this run's AOTI-C++ {demo} row "
                                       f"(aoti_runner --bench, median of {report.repeats})",
                                       measured.cpp_intra_op_threads)
    scale = report.iterations_scale
    report.triton = measure_triton(
        work_dir / "triton", package, dynamic, library, resolve_backend_dir(runner), runner,
        requests=max(20, int(TRITON_REQUESTS * scale)), seconds=TRITON_SECONDS * min(1.0, max(0.25, scale)),
        in_process=reference, on_step=step)


def _time_onnx(source: IdentitySource, options: ExportOptions, output: Path, x: torch.Tensor, iterations: int,
               warmup: int) -> Latency:
    """Export the source's model to a portable ONNX file (verified bit for bit like
    any export) and time a bare onnxruntime CPU session on ``x``: numpy in, numpy out,
    the session's default threads."""
    import onnxruntime

    require_verified(export_and_compile(source, dataclasses.replace(options, target="onnx"), output), "the ONNX file")
    session = onnxruntime.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x.numpy()}
    return time_calls(lambda: session.run(None, feed), iterations, warmup)


