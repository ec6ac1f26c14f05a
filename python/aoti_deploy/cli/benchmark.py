"""aoti-deploy bench: every runtime of the IdentityModel at several sizes in one run, with
ratios to the memory floor; writes a table, JSON, Markdown and a PNG plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.table import Table
from rich.text import Text

from ..bench.benchmark import FLOOR, SIZES, run_benchmark
from ..bench.benchmark_report import markdown_table, plot, targets, write_json
from ..bench.compile_time import compile_time_table
from ..bench.triton import TritonBench
from ..bench.triton_report import triton_latency_table, triton_targets, triton_threads_note, triton_throughput_table
from ..errors import EXIT_MISMATCH, AotiDeployError
from .common import (
    OpLibOption, RunnerOption, console, exit_with, put_working_folder_on_path, require_runner, step_progress,
)

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


@app.command(
    "bench",
    short_help="Benchmark a package against eager, torch.compile and ONNX Runtime, or the demo model.",
    help=(
        "With --package PKG: benchmark that package on its model, in one run and on the same inputs: eager, "
        "torch.compile (default and max-autotune, each compile bounded by --compile-timeout), the package in the "
        "Python runtime and in the C++ runner (1 thread and all threads), ONNX Runtime on an ONNX export of the "
        "model (Triton is not timed for a package: --triton adds a row that says so). --model package.module:factory gives the eager model (without "
        "it only the package's paths run); --inputs FILE the tensors (the package's input order), else the "
        "factory's example inputs, else random ones. Each path at each of --batches (dim 0 resized; a package "
        "static in batch measures only the batches it takes, and says so), with p50, p99 and throughput as "
        "ratios to the fastest. Writes bench.json, bench.md and bench.png to --output-dir.\n\n"
        "Without --package: benchmark the IdentityModel at several sizes, in one run: eager, torch.compile, the "
        "AOTI package from Python and from C++ (timed inside the C++ runner, whose allocator "
        "setting is reported), and the floor: four copy_() calls into buffers allocated before "
        "timing, the least a 4-layer identity must move, timed inside the C++ runner with the "
        "package's thread settings. Also the op kernel's bandwidth against clone(), and the C++ "
        "runner serving from 1 and 2 threads. With the ONNX extra installed, also the portable "
        "ONNX file in a bare onnxruntime session (its default threads). With --signing (the "
        "default), the demo package and a 68 MB one signed into bundles: verification time in both "
        "runtimes, and the C++ runner's cold start with it against the bare package. With --cold-start "
        "(the default), whole-process wall time and peak RSS on the demo package of aoti_runner, "
        "run_inference and run_inference --help. With --triton (the default), the demo package served by "
        "this project's aoti backend in one tritonserver: client latency over HTTP and gRPC, the server's "
        "time per request by phase, and throughput from 1, 4 and 16 gRPC clients with and without dynamic "
        "batching, against the in-process C++ p50 of this run.\n\n"
        "Prints p50/p90/p99 and each path's ratio to the floor, then the performance targets "
        "as measured; writes bench.json, bench.md and bench.png to --output-dir.\n\n"
        "Exit codes: 0 measured (targets are reported, not enforced, unless --check-targets; with --package, "
        "a path that cannot run is a row that says why), "
        "1 --check-targets and a target missed, or a package whose bits differ from eager's "
        "(never timed), 2 usage or build error."
    )
)
def benchmark(
    sizes: Annotated[
        str,
        typer.Option(help=f"Comma-separated input sizes (float32 NCHW): {', '.join(SIZES)}, or any BxCxHxW."),
    ] = ",".join(SIZES),
    iterations: Annotated[
        float,
        typer.Option(min=0.0001, help="Scale of the timed runs per size; 1.0 is 2000 / 200 / 60 runs "
                     "(a tenth as many warm-up runs first). 0.01 makes a smoke run."),
    ] = 1.0,
    optimize: Annotated[bool, typer.Option(help="Compile with export_compile's optimizations (--no-optimize: as exported).")] = True,
    serving: Annotated[bool, typer.Option(help="Also measure C++ serving throughput from 1 and 2 threads.")] = True,
    bandwidth_mb: Annotated[
        float, typer.Option(min=0, help="MB of the tensor for the op kernel vs clone() bandwidth (0: skip).")
    ] = 128.0,
    output_dir: Annotated[Path, typer.Option(help="Where the packages, JSON, Markdown and PNG go.")] = Path(
        "artifacts/bench"
    ),
    repeats: Annotated[
        int,
        typer.Option(min=1, help="Measure the compiled paths (AOTI from Python and C++, the floor, serving) this many "
                     "times and report the run with the median p50 (throughput for serving). With --package: time "
                     "every path this many times, the paths in turn (a drift of the host's speed then reaches all "
                     "alike), and report the median of each figure."),
    ] = 3,
    check_targets: Annotated[bool, typer.Option(help="Exit 1 if a performance target is missed.")] = False,
    onnx: Annotated[
        Optional[bool],
        typer.Option(
            "--onnx/--no-onnx",
            help="Also time the portable ONNX file in onnxruntime. Default: on when the ONNX extra is installed.",
            show_default=False,
        ),
    ] = None,
    signing: Annotated[
        bool,
        typer.Option(help="Also sign the demo package and a 68 MB one into bundles, and time their verification in "
                     "both runtimes and the C++ cold start with and without it (needs the sign extra)."),
    ] = True,
    cpu_targets: Annotated[
        str,
        typer.Option(help="Comma-separated portable CPU targets (x86-64-v2, x86-64-v3, x86-64-v4) to compile each size "
                     "for and time in the C++ runner beside the native package; 'none' skips them. Default: every "
                     "level this host has."),
    ] = "",
    compile_time: Annotated[
        bool,
        typer.Option(help="Also time a cold export_compile of the demo model, stage by stage, against plain "
                     "torch.export.export + aoti_compile_and_package, each in a fresh process with a fresh Inductor "
                     "cache, and a warm export_compile (a cache hit)."),
    ] = True,
    compile_runs: Annotated[
        int, typer.Option(min=1, help="Cold runs of each compile flow (in rotating order); the median run is shown."),
    ] = 3,
    cold_start: Annotated[
        bool,
        typer.Option(help="Also time whole processes on the demo package, from start to exit after the verified "
                     "output: aoti_runner, run_inference, and run_inference --help (median of 7, peak RSS)."),
    ] = True,
    triton: Annotated[
        Optional[bool],
        typer.Option("--triton/--no-triton", show_default=False,
                     help="Also serve the demo package from one tritonserver and time it against this run's "
                     "in-process C++ p50 (targets reported, never enforced). Skipped, with the reason, when the "
                     "triton extra is not installed or the backend (backends/aoti beside --runner) is not built. "
                     "Default: on for the demo, off with --package."),
    ] = None,
    package: Annotated[
        Optional[Path],
        typer.Option(help="Benchmark this package (.pt2 or bundle) instead of the demo model.", show_default=False),
    ] = None,
    inputs: Annotated[
        Optional[Path],
        typer.Option(help="With --package: a tensor file of its inputs, in the package's order.", show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(help="With --package: the eager model as package.module:factory, for the eager, "
                     "torch.compile and ONNX Runtime rows.", show_default=False),
    ] = None,
    model_arg: Annotated[
        Optional[List[str]],
        typer.Option(help="With --model: KEY=VALUE for the factory (repeatable).", show_default=False),
    ] = None,
    batches: Annotated[
        str, typer.Option(help="With --package: comma-separated batch sizes to measure.")
    ] = "1,8",
    threads: Annotated[
        int, typer.Option(min=0, help="With --package: intra-op threads for every path (0: all cores).")
    ] = 0,
    torch_compile: Annotated[
        bool, typer.Option(help="With --package: include the torch.compile rows.")
    ] = True,
    max_autotune: Annotated[
        bool, typer.Option(help="With --package: include torch.compile's max-autotune row.")
    ] = True,
    compile_timeout: Annotated[
        float, typer.Option(min=0, help="With --package: seconds a torch.compile may take before its row is "
                            "marked skipped (0: no bound).")
    ] = 600.0,
    runner: RunnerOption = None,
    op_lib: OpLibOption = None,
) -> None:
    put_working_folder_on_path()
    from ..runtime.onnx_extra import onnx_wanted

    if package is not None:
        _bench_package(package, inputs, model, model_arg or [], batches, threads, iterations, repeats, torch_compile,
                       max_autotune, compile_timeout, onnx, bool(triton), output_dir)
        return
    given = [name for name, value in (("--inputs", inputs), ("--model", model), ("--model-arg", model_arg))
             if value is not None]
    if given:
        exit_with(AotiDeployError(f"{', '.join(given)} need --package (the demo benchmark builds its own model)",
                                  kind="usage"))
    triton = True if triton is None else triton
    names = [name.strip() for name in sizes.split(",") if name.strip()]
    try:
        with_onnx = onnx_wanted(onnx)
        steps = (4 + int(with_onnx)) * len(names) + int(serving) + int(bandwidth_mb > 0) + 3 * int(signing)
        targets_wanted = _cpu_targets(cpu_targets)
        steps += int(cold_start) + int(compile_time) + len(targets_wanted) * len(names) + 4 * int(triton)
        runner = require_runner(runner)
        with step_progress(steps) as on_step:
            report = run_benchmark(names, output_dir, runner, op_lib, iterations, optimize, serving, bandwidth_mb,
                                   on_step, repeats, onnx=with_onnx, signing=signing,
                                   cold_start=cold_start, cpu_targets=targets_wanted, compile_time=compile_time,
                                   compile_runs=compile_runs, triton=triton)
        json_path = write_json(report, output_dir / "bench.json")
        (output_dir / "bench.md").write_text(markdown_table(report))
        # No sizes (--sizes ""): only the other sections ran, and there is no latency to plot.
        png_path = plot(report, output_dir / "bench.png") if report.sizes else None
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    machine = report.machine
    table = Table(title=f"latency per runtime: {machine['cpu']}, {machine['cores']} cores, torch {report.torch_version}")
    for column in ("size", "path", "p50 µs", "p90 µs", "p99 µs", "p50 / floor"):
        table.add_column(column, justify="left" if column in ("size", "path") else "right")
    for size in report.sizes:
        for path in size.latencies:
            lat = size.latencies[path]
            style = "bold" if path in ("AOTI-C++", FLOOR) else None
            table.add_row(size.name, path, f"{lat.p50:.1f}", f"{lat.p90:.1f}", f"{lat.p99:.1f}",
                          f"{size.ratio_to_floor(path):.2f}x", style=style)
        table.add_section()
    console.print(table)
    if report.sizes:
        size = report.sizes[0]
        console.print(f"C++ runner (and the floor): malloc {size.cpp_allocator}, serving thread pinned to a core; "
                      f"Python paths: this process, glibc defaults, {size.python_threads} intra-op thread(s). "
                      f"Packages: {'optimized' if report.optimize else '--no-optimize'}. Compiled paths: the median "
                      f"of {report.repeats} runs.")
    for size in report.sizes:
        choice = f" ({size.cpp_intra_op_choice})" if size.cpp_intra_op_choice else ""
        console.print(f"C++ runner, {size.name}: {size.cpp_intra_op_threads} intra-op thread(s){choice}, "
                      f"{size.cpp_page_faults} minor page faults in the timed region of "
                      f"{size.latencies['AOTI-C++'].runs} runs (whole process)")
    if report.serving:
        s = report.serving
        console.print(f"C++ serving {list(s.shape)}: {s.throughput_1:.0f} runs/s from 1 thread, {s.throughput_2:.0f} "
                      f"from 2 ({s.scaling:.2f}x); per-thread p50 {', '.join(f'{v:.1f}' for v in s.per_thread_p50_us)} µs; "
                      f"{s.mismatched_outputs} outputs with other bits; RSS {s.rss_start_kib} -> {s.rss_end_kib} KiB")

    if report.signing:
        bundles = Table(title="signed bundles: verification, and the C++ runner's cold start (whole process, "
                        "median of 7) from the bare package and from the verified bundle, against one SHA-256 of "
                        "the bundle's bytes (hashlib, OpenSSL's, on bytes in memory) and against a sealed copy alone "
                        "(read, hash and copy into a memfd, as the Triton backend does, and nothing else)")
        for column in ("bundle", "size", "files", "SHA-256 once ms", "verify C++ ms", "verify Python ms",
                       "cold start bare ms", "verified ms", "difference ms", "difference / SHA-256",
                       "sealed copy alone ms", "sealed copy / SHA-256", "verified / bare"):
            bundles.add_column(column, justify="left" if column == "bundle" else "right")
        for b in report.signing:
            bundles.add_row(b.name, f"{b.megabytes:.1f} MB", str(b.files), f"{b.sha256_ms:.1f}", f"{b.cpp_verify_ms:.1f}",
                            f"{b.python_verify_ms:.1f}", f"{b.cold_start_plain_ms:.0f}", f"{b.cold_start_signed_ms:.0f}",
                            f"{b.verification_cost_ms:.1f}", f"{b.cost_in_hashes:.2f}x", f"{b.sealed_copy_ms:.1f}",
                            f"{b.floor_in_hashes:.2f}x", f"{b.cold_start_ratio:.2f}x")
        console.print(bundles)

    if report.cold_start:
        c = report.cold_start
        cold = Table(title=f"cold start: whole process, median of {c.aoti_runner.runs} after a warm run, on {c.package}",
                     caption=f"run_inference / aoti_runner: {c.ratio:.1f}x")
        for column in ("runner", "median ms", "min ms", "peak RSS MB"):
            cold.add_column(column, justify="left" if column == "runner" else "right")
        for t in c.timings:
            cold.add_row(t.name, f"{t.median_ms:.0f}", f"{t.min_ms:.0f}", f"{t.peak_rss_mb:.0f}")
        console.print(cold)

    if report.compile_time:
        header, rows = compile_time_table(report.compile_time)
        compile_table = Table(title="compile time: the demo model, cold (a fresh Inductor cache per process), then warm")
        for column in header:
            compile_table.add_column(column, justify="right" if "(s)" in column and "stages" not in column else "left")
        for row in rows:
            compile_table.add_row(*row)
        console.print(compile_table)

    if report.triton:
        _print_triton(report.triton)
    elif report.triton_skipped:
        console.print(Text(f"Triton section skipped: {report.triton_skipped}", style="yellow"))

    checks = Table(title="performance targets, as measured in this run")
    for column in ("target", "measured", "met"):
        checks.add_column(column)
    found = targets(report)
    for target in found:
        checks.add_row(target.name, target.measured,
                       Text("yes", style="green") if target.met else Text("no", style="bold red"))
    console.print(checks)
    console.print(f"wrote {json_path}, {output_dir / 'bench.md'}" + (f" and {png_path}" if png_path else ""))
    if check_targets and not all(target.met for target in found):
        raise typer.Exit(EXIT_MISMATCH)


def _bench_package(path: Path, inputs: Optional[Path], model: Optional[str], model_args: list[str], batches: str,
                   threads: int, iterations: float, rounds: int, torch_compile: bool, max_autotune: bool,
                   compile_timeout: float,
                   onnx: Optional[bool], triton: bool, output_dir: Path) -> None:
    """--package: the package benchmark (bench/package_bench.py), printed and written."""
    from .. import api
    from ..bench.package_bench import package_call, write_outputs
    from ..runtime.onnx_extra import onnx_wanted
    from .parsing import parse_model_args

    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        exit_with(AotiDeployError(f"--batches {batches!r}: expected comma-separated sizes >= 1, e.g. 1,8",
                                  kind="usage"))
    try:
        loaded = api.load(path)
        call, eager = package_call(loaded, inputs, model, parse_model_args(model_args))
        with step_progress(len(sizes) * 8 * rounds) as on_step:
            result = loaded.benchmark(call.args, call.kwargs, model=eager, iterations=max(1, round(200 * iterations)),
                                      warmup=max(1, round(20 * iterations)), rounds=rounds, threads=threads or None,
                                      batches=sizes, compile=torch_compile, max_autotune=max_autotune,
                                      compile_timeout=compile_timeout, onnx=onnx_wanted(onnx), triton=triton,
                                      on_step=on_step)
        written = write_outputs(result, output_dir, title=model or path.name)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    table = Table(title=f"{path.name}: every path on the same inputs, {result.threads} thread(s), "
                  f"{result.iterations} runs each" + (f" in each of {result.rounds} rounds (medians)"
                                                       if result.rounds > 1 else "")
                  + "; ratios to the fastest at each batch")
    for column in ("batch", "path", "p50 µs", "p99 µs", "per s", "p50 / fastest", "p99 / fastest",
                   "throughput / best", "note"):
        table.add_column(column, justify="left" if column in ("path", "note") else "right")
    for batch in result.batches:
        for row in (r for r in result.rows if r.batch == batch):
            if row.skipped:
                table.add_row(str(batch), row.path, "-", "-", "-", "-", "-", "-", Text(f"skipped: {row.skipped}",
                                                                                      style="yellow"))
            else:
                table.add_row(str(batch), row.path, f"{row.p50_us:.1f}", f"{row.p99_us:.1f}", f"{row.throughput:.0f}",
                              f"{row.p50_ratio:.2f}x", f"{row.p99_ratio:.2f}x", f"{row.throughput_ratio:.2f}x",
                              row.note, style="bold" if row.p50_ratio == 1.0 else None)
        table.add_section()
    console.print(table)
    for note in result.notes:
        console.print(note)
    console.print(f"wrote {', '.join(str(p) for p in written)}")


def _print_triton(result: TritonBench) -> None:
    """The Triton section: latency against the in-process p50, throughput, and its
    targets as PASS or MISS (reported, not enforced: not part of --check-targets)."""
    header, rows = triton_latency_table(result)
    latency = Table(title="Triton: the demo model served by the aoti backend, against the in-process C++ runner",
                    caption=f"{triton_threads_note(result)}; {result.outputs_checked} responses checked bit for "
                    f"bit; server log {result.log_file}")
    for column in header:
        latency.add_column(column, justify="left" if column == header[0] else "right")
    for row in rows:
        latency.add_row(*row, style="bold" if row[0].startswith(("in-process", "server total")) else None)
    console.print(latency)
    header, rows = triton_throughput_table(result)
    seconds = result.throughput[0].seconds if result.throughput else 0.0
    throughput = Table(title=f"Triton throughput: concurrent gRPC clients, about {seconds:.1f} s per run "
                       f"(max_batch_size {result.max_batch_size}, max queue delay {result.max_queue_delay_us} µs)")
    for column in header:
        throughput.add_column(column, justify="left" if column == header[0] else "right")
    for row in rows:
        throughput.add_row(*row)
    console.print(throughput)
    checks = Table(title="Triton targets, as measured in this run (reported, not enforced)")
    for column in ("target", "measured", "result"):
        checks.add_column(column)
    for target in triton_targets(result):
        checks.add_row(target.name, target.measured,
                       Text("PASS", style="green") if target.met else Text("MISS", style="bold red"))
    console.print(checks)


def _cpu_targets(text: str) -> list[str]:
    """--cpu-targets: '' is every level this host has, 'none' is none."""
    from ..package.host import check_cpu_target
    from ..package.host import CPU_TARGETS, host_cpu_flags, host_cpu_targets

    if text.strip().lower() == "none":
        return []
    if not text.strip():
        return host_cpu_targets(host_cpu_flags())
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    for name in names:
        if name not in CPU_TARGETS:
            raise AotiDeployError(f"--cpu-targets: unknown target {name!r}; expected some of "
                                    f"{', '.join(CPU_TARGETS)}, or none", kind="usage")
        check_cpu_target(name)
    return names

