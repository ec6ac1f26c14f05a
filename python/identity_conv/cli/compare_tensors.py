"""compare_tensors: compare two tensor files bit-for-bit, e.g. the Python and the
C++ runtime's outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_MISMATCH
from ..runtime.tensor_files import load_tensors
from ..verify.bits import compare_tensor_lists
from .common import exit_with, print_bit_reports

app = typer.Typer(add_completion=False)


@app.command(
    help=(
        "Compare two tensor files (lists of tensors written by torch.save or a runner's "
        "--outputs) bit-for-bit.\n\nExit codes: 0 identical, 1 bits differ, 2 unreadable file."
    )
)
def compare_tensors(
    actual: Annotated[Path, typer.Argument(help="The tensor file under test.")],
    expected: Annotated[Path, typer.Argument(help="The reference tensor file.")],
) -> None:
    try:
        reports = compare_tensor_lists(load_tensors(actual), load_tensors(expected))
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    if not print_bit_reports([(f"tensor[{i}]", report) for i, report in enumerate(reports)]):
        raise typer.Exit(EXIT_MISMATCH)


def main() -> None:
    app()
