"""aoti-deploy compare: compare two tensor files, bit-for-bit by default (e.g. the
Python and the C++ runtime's outputs), or under a tolerance (e.g. a package's
outputs against eager's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_MISMATCH
from ..runtime.tensor_files import paired_tensors
from ..verify.tolerance import BITWISE, Tolerance, compare
from .common import (
    AtolOption, BitwiseOption, MaxUlpOption, RtolOption, console, exit_with, print_check, tolerance_override,
)

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


@app.command(
    "compare",
    short_help="Compare two tensor files, bit for bit or under a tolerance.",
    help=(
        "Compare two tensor files (lists of tensors written by torch.save, or dicts of name -> tensor; a "
        "runner's --outputs is a dict for a package whose model returns a dict, else a list): two dicts by "
        "name, anything else by position (a dict in its order). Bit-for-bit by default, or under --max-ulp N "
        "or --rtol R --atol A (torch.testing.assert_close's rule).\n\n"
        "Exit codes: 0 identical (or within the tolerance), 1 they differ, 2 unreadable file or bad options."
    )
)
def compare_tensors(
    actual: Annotated[Path, typer.Argument(help="The tensor file under test.")],
    expected: Annotated[Path, typer.Argument(help="The reference tensor file.")],
    bitwise: BitwiseOption = False,
    max_ulp: MaxUlpOption = None,
    rtol: RtolOption = None,
    atol: AtolOption = None,
) -> None:
    try:
        tolerance = tolerance_override(bitwise, max_ulp, rtol, atol) or Tolerance(BITWISE)
        paired, labels, actual_tensors, expected_tensors = paired_tensors(actual, expected)
        comparisons = [(label, compare(a, e, tolerance))
                       for label, a, e in zip(labels, actual_tensors, expected_tensors)]
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    console.print(f"compared {paired}: {len(comparisons)} tensor(s)")
    if not print_check("compare", comparisons):
        raise typer.Exit(EXIT_MISMATCH)


