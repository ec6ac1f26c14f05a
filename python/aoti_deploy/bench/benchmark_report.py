"""The benchmark suite's outputs, from its BenchReport: the JSON, the Markdown tables
(for the README), the PNG plot, and the performance targets judged on the run."""

from __future__ import annotations

import json
from pathlib import Path

from .benchmark import BenchReport, report_paths
from .compile_time import compile_time_table
from .plots import label_bar, latency_figure, save_latency_figure
from .results import Target, finite_or_none
from .triton_report import triton_latency_table, triton_targets, triton_threads_note, triton_throughput_table


def write_json(report: BenchReport, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(finite_or_none(report.to_json()), indent=2, allow_nan=False) + "\n")
    return path


def plot(report: BenchReport, path: Path) -> Path:
    """A PNG: p50 latency per path and size (log scale), the floor as a line."""
    figure, axes = latency_figure()
    names = [size.name for size in report.sizes]
    paths = report_paths(report)
    width = 0.8 / len(paths)
    for i, path_name in enumerate(paths):
        values = [size.latencies[path_name].p50 for size in report.sizes]
        positions = [j + (i - (len(paths) - 1) / 2) * width for j in range(len(names))]
        bars = axes.bar(positions, values, width, label=path_name)
        for bar, size in zip(bars, report.sizes):
            label_bar(axes, bar, f"{size.ratio_to_floor(path_name):.3g}x")
    return save_latency_figure(
        figure, axes, path, [f"{n}\n({s.megabytes:.1f} MB)" for n, s in zip(names, report.sizes)],
        f"IdentityModel latency per runtime (ratio to the 4-copy floor above each bar)\n"
        f"{report.machine['cpu']}, {report.machine['cores']} cores, torch {report.torch_version}",
    )


def targets(report: BenchReport) -> list[Target]:
    """The targets of the fast compiled path, each judged on this run's numbers."""
    found = []
    for size in report.sizes:
        cpp, python = size.latencies["AOTI-C++"], size.latencies["AOTI-Python"]
        ratio = size.ratio_to_floor("AOTI-C++")
        found.append(Target(f"{size.name}: AOTI-C++ p50 <= 1.2x floor", f"{ratio:.2f}x", ratio <= 1.2))
        tail = cpp.p99 / cpp.p50
        found.append(Target(f"{size.name}: AOTI-C++ p99 <= 1.5x its p50", f"{tail:.2f}x", tail <= 1.5))
        found.append(Target(f"{size.name}: AOTI-C++ p50 <= AOTI-Python p50",
                            f"{cpp.p50:.1f} vs {python.p50:.1f} us", cpp.p50 <= python.p50))
    if report.bandwidth:
        b = report.bandwidth
        found.append(Target(f"op kernel >= 0.9x clone() bandwidth ({b.megabytes:.0f} MB)",
                            f"{b.kernel_gb_s:.1f} vs {b.clone_gb_s:.1f} GB/s = {b.ratio:.2f}x", b.ratio >= 0.9))
    for bundle in report.signing:
        found.append(Target(f"signed bundle ({bundle.name}): C++ cold start verified - bare <= 1.2x one SHA-256 "
                            "of its bytes",
                            f"{bundle.verification_cost_ms:.1f} vs {bundle.sha256_ms:.1f} ms = "
                            f"{bundle.cost_in_hashes:.2f}x (a sealed copy alone: {bundle.floor_in_hashes:.2f}x)",
                            bundle.cost_in_hashes <= 1.2))
    if report.cold_start:
        c = report.cold_start
        for timing, limit_ms in ((c.aoti_runner, 250), (c.run_inference, 2000), (c.run_inference_help, 500)):
            found.append(Target(f"cold start: {timing.name} <= {limit_ms / 1e3:g} s (whole process, median)",
                                f"{timing.median_ms:.0f} ms", timing.median_ms <= limit_ms))
    if report.compile_time:
        t = report.compile_time
        found.append(Target("compile: cold export_compile <= 1.15x torch.export + aoti_compile_and_package",
                            f"{t.toolkit.work_s:.1f} vs {t.baseline.work_s:.1f} s = {t.cold_ratio:.2f}x",
                            t.cold_ratio <= 1.15))
        found.append(Target("compile: warm export_compile (cache hit) <= 2.0 s, whole process",
                            f"{t.warm_s:.2f} s", t.warm_s <= 2.0))
    if report.serving:
        s = report.serving
        found.append(Target("C++ serving: 2 threads >= 1.8x the throughput of 1",
                            f"{s.throughput_2:.0f} vs {s.throughput_1:.0f} runs/s = {s.scaling:.2f}x", s.scaling >= 1.8))
    return found


def markdown_table(report: BenchReport) -> str:
    """The latency table as Markdown, for the README."""
    lines = ["| size | path | p50 (µs) | p90 (µs) | p99 (µs) | p50 / floor |", "|---|---|---|---|---|---|"]
    for size in report.sizes:
        for path in size.latencies:
            lat = size.latencies[path]
            lines.append(f"| {size.name} | {path} | {lat.p50:.1f} | {lat.p90:.1f} | {lat.p99:.1f} | "
                         f"{size.ratio_to_floor(path):.2f}x |")
    if report.signing:
        lines += ["", "| signed bundle | size | files | SHA-256 once (ms) | verify, C++ (ms) | verify, Python (ms) | "
                  "C++ cold start bare (ms) | verified (ms) | difference (ms) | difference / SHA-256 | "
                  "sealed copy alone (ms) | sealed copy / SHA-256 | verified / bare |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {b.name} | {b.megabytes:.1f} MB | {b.files} | {b.sha256_ms:.1f} | {b.cpp_verify_ms:.1f} | "
                  f"{b.python_verify_ms:.1f} | {b.cold_start_plain_ms:.0f} | {b.cold_start_signed_ms:.0f} | "
                  f"{b.verification_cost_ms:.1f} | {b.cost_in_hashes:.2f}x | {b.sealed_copy_ms:.1f} | "
                  f"{b.floor_in_hashes:.2f}x | {b.cold_start_ratio:.2f}x |"
                  for b in report.signing]
    if report.cold_start:
        c = report.cold_start
        lines += ["", f"| cold start (whole process, median of {c.aoti_runner.runs}) | median (ms) | min (ms) | "
                  "peak RSS (MB) |", "|---|---|---|---|"]
        lines += [f"| {t.name} | {t.median_ms:.0f} | {t.min_ms:.0f} | {t.peak_rss_mb:.0f} |" for t in c.timings]
        lines.append(f"| run_inference / aoti_runner | {c.ratio:.1f}x | | |")
    if report.compile_time:
        header, rows = compile_time_table(report.compile_time)
        lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    if report.triton:
        for header, rows in (triton_latency_table(report.triton), triton_throughput_table(report.triton)):
            lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += ["", f"Triton: {triton_threads_note(report.triton)}."]
        lines += ["", "| Triton target (reported, not enforced) | measured | result |", "|---|---|---|"]
        lines += [f"| {t.name} | {t.measured} | {'PASS' if t.met else 'MISS'} |" for t in triton_targets(report.triton)]
    elif report.triton_skipped:
        lines += ["", f"Triton section skipped: {report.triton_skipped}"]
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t.name} | {t.measured} | {'yes' if t.met else 'no'} |" for t in targets(report)]
    return "\n".join(lines) + "\n"
