"""Load and unload one model in tritonserver many times, with requests in between, and
check that the server does not grow: it starts its own server (explicit model control,
$TMPDIR a fresh folder, free loopback ports), runs the cycles, stops it by its PID, and
prints a summary table. Exits 1 if RSS or open file descriptors grew more than 1.1x
after warm-up, $TMPDIR grew or kept anything after the server stopped, or a request
failed or answered other bits; 2 on a usage or start-up error.

    scripts/serve_triton.sh   # writes artifacts/triton_repository/identity_conv
    .venv/bin/python scripts/triton_soak.py --repository artifacts/triton_repository \\
        --model identity_conv --cycles 200 --warmup 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aoti_deploy.errors import AotiDeployError
from aoti_deploy.locate import triton_backend_dir
from aoti_deploy.serve.soak import GROWTH_LIMIT, SoakReport, run_soak


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def summary(report: SoakReport) -> str:
    """The result as a Markdown table (pasted into docs/triton.md as it is)."""
    start, warm, end = report.start, report.warm, report.end
    rows = [
        ("cycles (load, requests, unload)", f"{len(report.samples) - 1} of {report.cycles}"),
        ("warm-up", f"first {report.warmup} cycles"),
        ("RSS start / after warm-up / end", f"{mib(start.rss)} / {mib(warm.rss)} / {mib(end.rss)}"),
        ("RSS peak after warm-up / after warm-up", f"{report.ratio('rss'):.3f}x (limit {report.limit}x)"),
        ("open fds start / after warm-up / end", f"{start.fds} / {warm.fds} / {end.fds}"),
        ("fds peak after warm-up / after warm-up", f"{report.ratio('fds'):.3f}x (limit {report.limit}x)"),
        ("threads start / after warm-up / end", f"{start.threads} / {warm.threads} / {end.threads}"),
        ("$TMPDIR entries start / after warm-up / max after / end",
         f"{start.tmp_entries} / {warm.tmp_entries} / {max(s.tmp_entries for s in report.after_warmup)} / "
         f"{end.tmp_entries}"),
        ("$TMPDIR entries after the server stopped", "not checked" if report.tmp_left is None
         else str(len(report.tmp_left))),
        ("requests sent / failed / other bits", f"{report.requests} / {len(report.failures)} / {report.mismatches}"),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'measure':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
    lines += [f"| {name:<{width}} | {value} |" for name, value in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repository", type=Path, default=Path("artifacts/triton_repository"),
                        help="the model repository (default: artifacts/triton_repository)")
    parser.add_argument("--model", default="identity_conv", help="the model to cycle (default: identity_conv)")
    parser.add_argument("--cycles", type=int, default=200, help="load/unload cycles (default: 200)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="cycles before the reference sample for growth (default: 20)")
    parser.add_argument("--requests", type=int, default=4, help="requests per cycle (default: 4)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where the server's log and $TMPDIR go (default: a new temp folder)")
    args = parser.parse_args()
    if args.cycles < 1 or not 0 <= args.warmup < args.cycles or args.requests < 1:
        parser.error("need --cycles >= 1, 0 <= --warmup < --cycles and --requests >= 1")

    def progress(report: SoakReport) -> None:
        sample = report.end
        if sample.cycle % 10 == 0 or sample.cycle == report.cycles:
            print(f"cycle {sample.cycle:>4}/{report.cycles}: RSS {mib(sample.rss)}, {sample.fds} fds, "
                  f"{sample.tmp_entries} in $TMPDIR, {report.requests} requests, {len(report.failures)} failed, "
                  f"{report.seconds:.0f} s", flush=True)

    try:
        report, server = run_soak(args.repository, args.model, backend_dir=triton_backend_dir(), cycles=args.cycles,
                                  warmup=args.warmup, requests_per_cycle=args.requests, work_dir=args.work_dir,
                                  on_cycle=progress)
    except AotiDeployError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"tritonserver pid {server.pid} stopped (exit code {server.process.returncode}); log {server.log_file}")
    print(summary(report))
    problems = report.problems()
    for problem in problems:
        print(f"FAILED: {problem}")
    if not problems:
        print(f"PASSED: RSS and open fds within {GROWTH_LIMIT}x after warm-up, nothing left in $TMPDIR, "
              "every answer bit for bit")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
