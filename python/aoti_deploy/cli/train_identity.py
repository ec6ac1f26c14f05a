"""aoti-deploy train: train the IdentityModel's conv weights through the custom layers
in Python, then export and compile the trained model and check the package against
eager in both runtimes: one op library serving training and C++ inference."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.table import Table

from ..api import IdentitySource, export
from ..errors import EXIT_MISMATCH
from ..ops.loader import load_op_library
from ..runtime.cpp_runner import WROTE_OUTPUTS, CppRunner
from ..models.train import train_channel_scale
from ..verify.tolerance import BITWISE, Tolerance, compare
from .common import OpLibOption, RunnerOption, console, exit_with, print_check, require_runner, step_progress

app = typer.Typer(add_completion=False)


@app.command(
    "train",
    short_help="Train the IdentityModel's conv weights through the custom layers, then deploy and check it.",
    help=(
        "Train the IdentityModel's two native conv weights so the model scales each channel "
        "by --scale, with gradients through the torchbind class and the custom op. Then export "
        "and compile the trained model and check the package against eager, bit for bit, in "
        "Python and in the C++ runner.\n\nExit codes: 0 trained and both runtimes match eager, "
        "1 a runtime differs from eager, 2 usage, build or training error."
    )
)
def train_identity(
    scale: Annotated[str, typer.Option(help="Comma-separated per-channel target scale.")] = "0.5,2.0,1.5",
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.")] = 200,
    lr: Annotated[float, typer.Option(min=0.0, help="Adam learning rate.")] = 0.05,
    output: Annotated[Path, typer.Option(help="Where to write the trained package.")] = Path("artifacts/trained.pt2"),
    runner: RunnerOption = None,
    op_lib: OpLibOption = None,
) -> None:
    try:
        target = [float(v) for v in scale.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, got {scale!r}", param_hint="--scale")
    try:
        runner = require_runner(runner)
        library = load_op_library(op_lib)
        with step_progress(steps) as on_step:
            result = train_channel_scale(target, steps=steps, lr=lr, on_step=lambda i, loss: on_step(f"step {i + 1} loss {loss:.2e}"))
        # Per-channel scaling compiles to the same multiply eager does: held to its bits.
        source = IdentitySource(batch=2, channels=len(target), height=8, width=12, model=result.model)
        build = export(source, package_path=output, op_libraries=[library], tolerance=Tolerance(BITWISE)).result
        x = build.example_input
        with torch.no_grad():
            eager = result.model(x)
        (cpp_output,) = CppRunner(build.package_path, [library], executable=runner).outputs([x], accept=WROTE_OUTPUTS)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    table = Table(title="per-channel scale learned through the custom layers")
    for column in ("channel", "target", "learned"):
        table.add_column(column)
    for channel, (want, got) in enumerate(zip(result.target_scale, result.learned_scale)):
        table.add_row(str(channel), f"{want:.4f}", f"{got:.4f}")
    console.print(table)
    console.print(f"loss: {result.losses[0]:.3e} -> {result.losses[-1]:.3e} after {steps} steps")
    console.print(f"package: {build.package_path}")
    comparisons = [*build.checks, ("eager vs AOTI-C++", compare(cpp_output, eager, build.tolerance))]
    if not print_check("compiled vs eager", comparisons):
        raise typer.Exit(EXIT_MISMATCH)

