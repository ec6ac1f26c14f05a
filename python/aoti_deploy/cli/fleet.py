"""aoti-deploy fleet: a rolling update under load on one tritonserver, then two replicas
behind HAProxy (one killed and restarted, then the update rolled across both), with a
table of failed requests, switch, detect and return times and p99 latencies."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.console import Console
from rich.table import Table

from ..errors import EXIT_MISMATCH
from .common import console, exit_with, verdict

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _times(result) -> str:
    if result.detect_s is not None:
        return (f"detect {_seconds(result.detect_s)}, ready {_seconds(result.ready_s)}, "
                f"back {_seconds(result.return_s)}")
    if result.first_new_s is None and result.last_old_s is None:
        return "-"
    return f"first new {_seconds(result.first_new_s)}, last old {_seconds(result.last_old_s)}"


def summary_table(results) -> Table:
    """One row per scenario; its "failed requests N" cell is one word group, so a log
    line can be searched for it."""
    from rich import box

    table = Table(title="fleet: every answer compared bit for bit with the old and the new version's outputs",
                  box=box.SIMPLE, padding=(0, 1))
    for column in ("scenario", "requests", "failed", "old / new / neither", "old after switch", "times",
                   "retries", "p99 steady / during"):
        table.add_column(column, no_wrap=True)
    for result in results:
        table.add_row(
            result.scenario, str(result.requests), f"failed requests {result.failed}",
            f"{result.old} / {result.new} / {result.other_bits}", str(result.stale), _times(result),
            "-" if result.retries is None else str(result.retries),
            f"{_ms(result.p99_steady_ms)} / {_ms(result.p99_event_ms)}",
            style=None if result.passed else "bold red",
        )
    return table


def summary_line(result) -> str:
    """The row as one plain line, whatever the terminal's width."""
    retries = "" if result.retries is None else f", balancer retries {result.retries}"
    return (f"{result.scenario}: failed requests {result.failed}, {result.requests} requests "
            f"({result.old} old, {result.new} new, {result.other_bits} neither, {result.stale} old after the "
            f"switch), {_times(result)}{retries}, p99 steady {_ms(result.p99_steady_ms)}, during "
            f"{_ms(result.p99_event_ms)}")


@app.command(
    "fleet",
    short_help="Roll a new signed version out under load, on one server and across two replicas behind HAProxy.",
    help=escape(
        "Serve a small MLP from tritonserver under load from --clients HTTP clients and change it under them: "
        "(1) a new signed version (other weights) is published into the repository of one server, which loads "
        "it and unloads the old one; (2) two replicas serve behind HAProxy (Debian's haproxy; health checks on "
        "/v2/health/ready, retries of failed inference on the other replica), one gets SIGKILL and is "
        "restarted; (3) the update is rolled across both replicas, one at a time (drained, loaded, back). "
        "Every response is compared bit for bit with each version's outputs, computed beforehand with the "
        "Python runtime. The two versions are compiled once into WORK/packages and reused.\n\n"
        "Example:\n\n"
        "  aoti-deploy fleet --work artifacts/fleet\n\n"
        "Exit codes: 0 no failed request and every answer one version's bits (only the new one's after a "
        "switch), 1 otherwise, 2 a stage could not run (haproxy or the triton extra missing, a server that "
        "did not start)."
    ),
)
def fleet(
    work: Annotated[Path, typer.Option(help="Folder for the packages, keys, repositories and logs.")] = Path(
        "artifacts/fleet"),
    clients: Annotated[int, typer.Option(min=1, help="Client threads sending without pause.")] = 8,
    control: Annotated[
        str, typer.Option(help="How the single server finds the new version: poll (--repository-poll-secs=1) "
                               "or explicit (POST .../load).")
    ] = "poll",
    steady_seconds: Annotated[float, typer.Option(min=0.5, help="Load before each event (the baseline).")] = 5.0,
    down_seconds: Annotated[float, typer.Option(min=0.0, help="How long the killed replica stays down.")] = 2.0,
    settle_seconds: Annotated[float, typer.Option(min=0.0, help="Load after each event has completed.")] = 3.0,
) -> None:
    def stop_on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM unwinds like Ctrl-C, so every server and the balancer are stopped.
    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        from ..locate import triton_backend_dir
        from ..serve.fleet import Timing, run_fleet
        from ..serve.triton_install import require_triton_client, tritonserver_binary

        require_triton_client()
        tritonserver_binary()
        from ..api import export  # torch: only once the extra is known to be there
        report = run_fleet(
            work, triton_backend_dir(), clients=clients, control=control,
            timing=Timing(steady_s=steady_seconds, down_s=down_seconds, settle_s=settle_seconds),
            on_stage=lambda text: console.print(f"==> {text}"), export=export,
        )
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    wide = Console(highlight=False, markup=False, soft_wrap=True, width=max(console.width, 190))
    wide.print(summary_table(report.results))
    for result in report.results:
        console.print(summary_line(result))
        for error in result.errors:
            console.print(f"{result.scenario}: {error}")
    console.print(f"logs and repositories: {work}")
    console.print(verdict(report.passed))
    if not report.passed:
        raise typer.Exit(EXIT_MISMATCH)
