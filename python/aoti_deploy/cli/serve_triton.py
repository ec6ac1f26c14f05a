"""aoti-deploy serve: start tritonserver on a model repository with this project's `aoti`
backend, send each model requests over HTTP and gRPC, and check every output bit for
bit; then stop the server, or with --keep leave it serving."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.markup import escape
from rich.text import Text

from ..errors import EXIT_MISMATCH, EXIT_USAGE, AotiDeployError
from .common import console, exit_with, verdict

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


def _check_line(check) -> Text:
    """One line per request: protocol, model, inputs, and each output's verdict."""
    head = f"{check.protocol:<4} {check.model} {check.label} vs {check.reference}: "
    if check.error:
        return Text(head).append(check.error, style="bold red")
    parts = [f"{output} {report}" for output, report in zip(check.outputs, check.reports)]
    return Text(head).append("; ".join(parts), style="green" if check.passed else "bold red")


@app.command(
    "serve",
    short_help="Serve a Triton model repository with the aoti backend, and check every output bit for bit.",
    help=escape(
        "Serve a Triton model repository (written by aoti-deploy triton-repository) with this project's "
        "aoti backend and check it: tritonserver (from the triton extra: pip install -e '.[triton]') starts "
        "on free 127.0.0.1 ports with the backend directory of this checkout's build (backends/aoti/libtriton_aoti.so, built by "
        "./scripts/setup.sh), then each model gets --requests seeded random inputs at its package's example "
        "shapes, plus one of special values (NaN payloads, -0.0, infinities, subnormals) for float inputs, "
        "over HTTP and over gRPC, sent concurrently so the dynamic batcher can merge them. Each output is "
        "compared bit for bit with the inputs (random inputs to an identity package) or with the Python "
        "runtime's outputs for the same inputs (any other package, and special values, which native layers may "
        "change, e.g. by quieting a signalling NaN). Then the server is stopped by its PID, unless --keep.\n\n"
        "Example:\n\n"
        "  aoti-deploy serve --repository artifacts/triton_repository --model identity_conv --keep\n\n"
        "With --keep and Triton's usual ports, clients written for a default tritonserver work unchanged:\n\n"
        "  aoti-deploy serve --repository models --keep --http-port 8000 --grpc-port 8001 --metrics-port 8002\n\n"
        "Exit codes: 0 every output identical, 1 some differ, 2 usage error, a request failed, or the server "
        "or a model failed to start or load (the reason and the end of the server log are printed)."
    )
)
def serve_triton(
    repository: Annotated[Path, typer.Option(help="The model repository folder.", show_default=False)],
    model: Annotated[
        Optional[List[str]],
        typer.Option(help="A model to check (repeatable). Default: every model in the repository.", show_default=False),
    ] = None,
    requests: Annotated[int, typer.Option(min=1, help="Random requests per model and protocol.")] = 8,
    keep: Annotated[
        bool,
        typer.Option("--keep", help="Leave the server running afterwards; print its URLs, PID and how to stop it."),
    ] = False,
    timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds to wait for the server and the models to be ready.")
    ] = 120.0,
    log_file: Annotated[
        Optional[Path],
        typer.Option(help="Append the server's output here. Default: a new file in the temp folder.",
                     show_default=False),
    ] = None,
    http_port: Annotated[
        int, typer.Option(min=0, max=65535, help="The HTTP port on 127.0.0.1 (Triton's usual one is 8000). 0: a free port.")
    ] = 0,
    grpc_port: Annotated[
        int, typer.Option(min=0, max=65535, help="The gRPC port on 127.0.0.1 (Triton's usual one is 8001). 0: a free port.")
    ] = 0,
    metrics_port: Annotated[
        int, typer.Option(min=0, max=65535, help="The metrics port (Triton's usual one is 8002). 0: a free port.")
    ] = 0,
    pid_file: Annotated[
        Optional[Path],
        typer.Option(help="With --keep: write the server's PID here, for `kill \"$(cat FILE)\"`.", show_default=False),
    ] = None,
) -> None:
    if pid_file is not None and not keep:
        exit_with(AotiDeployError("--pid-file is for a server left running: add --keep", kind="usage"))
    server = None

    def stop_on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGTERM (a timeout, a cancelled job) unwinds like Ctrl-C, which stops the server.
    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        from ..api import serve_repository

        serving = serve_repository(
            repository, list(model or []), keep=keep, log_file=log_file, http_port=http_port or None,
            grpc_port=grpc_port or None, metrics_port=metrics_port or None, timeout=timeout,
            on_started=lambda server: console.print(
                f"tritonserver pid {server.pid}: {server.http_url} (HTTP), {server.grpc_url} (gRPC); "
                f"log {server.log_file}"),
        )
        server = serving.server
        console.print(f"ready in {serving.ready_seconds:.1f} s: "
                      + ", ".join(f"{m.name} (version {m.version})" for m in serving.models))
        passed = True
        failed_requests = False
        for served in serving.models:
            checks = serving.check(served, requests, on_check=lambda c: console.print(_check_line(c)))
            stats = serving.statistics(served)
            console.print(
                f"{served.name}: {stats.inference_count} inferences in {stats.execution_count} executions"
            )
            passed = all(check.passed for check in checks) and passed
            failed_requests = any(check.error for check in checks) or failed_requests
    except Exception as error:  # typed errors keep their code; anything else exits 2
        if server is not None:
            server.stop()
        exit_with(error)
    except BaseException:  # Ctrl-C: never leave the server behind
        if server is not None:
            server.stop()
        raise

    try:
        console.print(verdict(passed))
        if keep:
            console.print(f"the server keeps running: pid {server.pid}")
            console.print(f"  HTTP    {server.http_url}")
            console.print(f"  gRPC    {server.grpc_url}")
            console.print(f"  metrics {server.metrics_url}")
            console.print(f"  log     {server.log_file}")
            console.print(f"  command {shlex.join(server.command)}")
            console.print(f"stop it with: kill {server.pid}")
            if pid_file is not None:
                pid_file.write_text(f"{server.pid}\n")
    finally:
        if not keep:
            code = server.stop()
            console.print(f"stopped tritonserver pid {server.pid} (exit code {code})")
    if failed_requests:
        raise typer.Exit(EXIT_USAGE)  # a request failed: not a bit verdict
    if not passed:
        raise typer.Exit(EXIT_MISMATCH)

