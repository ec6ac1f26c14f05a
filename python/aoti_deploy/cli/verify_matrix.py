"""aoti-deploy matrix: the same bits in every runtime. Compiles one package per dtype
and shape mode, then compares eager, torch.compile, the package in Python and the
package in C++ on random and special-value inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import EXIT_MISMATCH
from ..ops.loader import load_op_library
from ..package.dtypes import DTYPES
from ..bench.parity import IDENTITY_PAIR, INPUT_KINDS, ONNX_PAIR, RUNTIME_PAIRS, SHAPE_MODES, cell_passed, matrix_passed, run_matrix
from .common import OpLibOption, RunnerOption, console, exit_with, require_runner, step_progress, verdict

app = typer.Typer(add_completion=False)


def _split(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@app.command(
    "matrix",
    short_help="The same bits in every runtime: eager, torch.compile, the package in Python and in C++.",
    help=(
        "Compare eager, torch.compile, the AOTI package in Python and the AOTI package in "
        "C++ bit-for-bit, over dtypes x static/dynamic shapes x random/special-value "
        "inputs (NaN payloads, +-0, +-inf, subnormals). Where the model's output is not "
        "its input, the report names the layer that changed which values.\n\n"
        "With the ONNX extra installed, an ONNX column compares a portable ONNX file run in "
        "onnxruntime with eager; dtypes ONNX or onnxruntime cannot run show n/a with the reason.\n\n"
        "Exit codes: 0 every runtime pair identical in every cell and no custom layer "
        "changed a bit; 1 otherwise; 2 usage or build error."
    )
)
def verify_matrix(
    dtypes: Annotated[str, typer.Option(help="Comma-separated dtypes.")] = ",".join(DTYPES),
    shapes: Annotated[str, typer.Option(help="Comma-separated shape modes: static, dynamic.")] = ",".join(SHAPE_MODES),
    inputs: Annotated[str, typer.Option(help="Comma-separated input kinds: random, special.")] = ",".join(INPUT_KINDS),
    work_dir: Annotated[Path, typer.Option(help="Where packages and tensor files go.")] = Path("artifacts/verify"),
    runner: RunnerOption = None,
    op_lib: OpLibOption = None,
    onnx: Annotated[
        Optional[bool],
        typer.Option(
            "--onnx/--no-onnx",
            # Escaped: rich would take [onnx] for a markup tag and drop it.
            help=escape("Add the ONNX column. Default: on when the ONNX extra (pip install -e '.[onnx]') is installed."),
            show_default=False,
        ),
    ] = None,
) -> None:
    from ..runtime.onnx_extra import onnx_wanted

    try:
        with_onnx = onnx_wanted(onnx)
        runner = require_runner(runner)
        library = load_op_library(op_lib)
        axes = (_split(dtypes), _split(shapes), _split(inputs))
        steps = len(axes[0]) * len(axes[1]) * (1 + len(axes[2]))
        with step_progress(steps) as on_step:
            results = run_matrix(work_dir, runner, library, *axes, on_step=on_step, onnx=with_onnx)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    table = Table(title="bitwise parity matrix (identical = same bits; N = elements whose bits differ)")
    headers = ["dtype", "shapes", "input", "shape", "input=eager", "eager=compile", "eager=AOTI-py", "AOTI-py=C++"]
    headers += ["eager=ONNX"] if with_onnx else []
    for column in [*headers, "cell"]:
        table.add_column(column, no_wrap=True)
    for cell in results:
        pairs = [cell.pairs[IDENTITY_PAIR], *(cell.pairs[p] for p in RUNTIME_PAIRS)]
        columns = [Text("identical", style="green") if r.identical else Text(str(r.num_differ), style="red")
                   for r in pairs]
        if with_onnx:
            onnx_report = cell.pairs.get(ONNX_PAIR)
            columns.append(
                Text("n/a", style="yellow") if onnx_report is None
                else Text("identical", style="green") if onnx_report.identical
                else Text(str(onnx_report.num_differ), style="red")
            )
        table.add_row(cell.dtype, cell.shapes, cell.input_kind, "x".join(map(str, cell.shape)), *columns,
                      verdict(cell_passed(cell)))
    console.print(table)

    deviations = [cell for cell in results if not cell.identity_holds]
    if deviations:
        console.print("Where the output is not the input (input=eager), layer by layer:")
        for cell in deviations:
            console.print(f"  {cell.dtype} {cell.shapes} {cell.input_kind}:")
            for change in cell.layer_changes or []:
                console.print(f"    {change}; first: {change.report}")
            if not cell.layer_changes:
                console.print("    no single layer changes bits; the full model does (unexplained)")
    for cell in results:
        for pair, report in cell.pairs.items():
            if pair != IDENTITY_PAIR and not report.identical:
                console.print(f"  {cell.dtype} {cell.shapes} {cell.input_kind}: {pair}: {report}")
    skipped = {cell.dtype: cell.onnx_skipped for cell in results if cell.onnx_skipped}
    for dtype, reason in skipped.items():
        console.print(f"ONNX n/a for {dtype}: {reason}")
    passed = matrix_passed(results)
    console.print(Text("runtimes agree bit-for-bit in every cell: ").append_text(verdict(passed)))
    if not passed:
        raise typer.Exit(EXIT_MISMATCH)

