"""The Triton section's tables (latency against the in-process p50, throughput per
client count) and its targets, reported and never enforced; for the CLI and the
Markdown."""

from __future__ import annotations

from .results import Latency, Target
from .triton import BATCHING_MODEL, DEMO_MODEL, PHASES, TOTAL, TritonBench

# Targets (reported, not enforced): Triton's compute against the in-process p50.
COMPUTE_INFER_LIMIT = 1.3  # x in-process p50
SERVER_OVERHEAD_LIMIT_US = 100.0  # server total p50 - in-process p50
BATCHING_SCALING_LIMIT = 3.0  # throughput at 16 clients / at 1, with dynamic batching


def triton_latency_table(t: TritonBench) -> tuple[list[str], list[list[str]]]:
    """Latency against the in-process p50, as (header, rows)."""

    def row(name: str, latency: Latency) -> list[str]:
        return [name, f"{latency.p50:.1f}", f"{latency.p99:.1f}", f"{t.ratio(latency):.2f}x"]

    rows = [
        row(f"in-process: {t.in_process.source}", t.in_process.latency),
        row(f"Triton HTTP client p50/p99 ({t.http.runs} requests, one connection)", t.http),
        row(f"Triton gRPC client p50/p99 ({t.grpc.runs} requests, one connection)", t.grpc),
    ]
    rows += [row(f"server {phase} p50/p99", t.phases[phase]) for phase in PHASES]
    rows.append(row(f"server total per request p50/p99 ({' + '.join(PHASES)})", t.phases[TOTAL]))
    header = [f"Triton, {DEMO_MODEL} model {'x'.join(map(str, t.shape))} (one client, batch 1)", "p50 (µs)",
              "p99 (µs)", "p50 / in-process p50"]
    return header, rows


def triton_throughput_table(t: TritonBench) -> tuple[list[str], list[list[str]]]:
    """Throughput per model and client count, with the requests merged per execution,
    as (header, rows)."""
    rows = []
    for run in t.throughput:
        first = min((r for r in t.throughput if r.model == run.model), key=lambda r: r.clients)
        rows.append([run.model, str(run.clients), f"{run.throughput:.0f}", str(run.requests), str(run.executions),
                     f"{run.per_execution:.2f}", f"{run.throughput / first.throughput:.2f}x"])
    header = ["Triton throughput (gRPC clients, batch-1 requests)", "clients", "requests/s", "requests",
              "executions", "requests per execution", "ratio to the fewest clients"]
    return header, rows


def triton_threads_note(t: TritonBench) -> str:
    """The intra-op threads on each side of the comparison."""
    server = f"{t.server_intra_op_threads}" if t.server_intra_op_threads else "an unlogged number of"
    return (f"intra-op threads: in-process {t.in_process.intra_op_threads}, Triton backend {server} per instance "
            f"(its default leaves one core to Triton's own threads)")


def triton_targets(t: TritonBench) -> list[Target]:
    """The section's targets, judged on this run (reported, never enforced)."""
    infer, total, reference = t.phases["compute_infer"], t.phases[TOTAL], t.in_process.latency.p50
    found = [
        Target(f"Triton compute_infer p50 <= {COMPUTE_INFER_LIMIT:g}x in-process p50",
               f"{infer.p50:.1f} vs {reference:.1f} us = {t.ratio(infer):.2f}x", t.ratio(infer) <= COMPUTE_INFER_LIMIT),
        Target(f"Triton server total p50 <= in-process p50 + {SERVER_OVERHEAD_LIMIT_US:g} us",
               f"{total.p50:.1f} vs {reference:.1f} us = {total.p50 - reference:+.1f} us",
               total.p50 <= reference + SERVER_OVERHEAD_LIMIT_US),
    ]
    runs = sorted((r for r in t.throughput if r.model == BATCHING_MODEL), key=lambda r: r.clients)
    if len(runs) > 1:
        scaling = t.scaling(BATCHING_MODEL)
        found.append(Target(f"Triton dynamic batching: throughput at {runs[-1].clients} clients >= "
                            f"{BATCHING_SCALING_LIMIT:g}x at {runs[0].clients}",
                            f"{runs[-1].throughput:.0f} vs {runs[0].throughput:.0f} req/s = {scaling:.2f}x",
                            scaling >= BATCHING_SCALING_LIMIT))
    return found
