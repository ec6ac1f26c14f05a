"""aoti-deploy compare: compare two tensor files, bit-for-bit by default (e.g. the
Python and the C++ runtime's outputs), or under a tolerance (e.g. a package's
outputs against eager's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import EXIT_MISMATCH, VerificationError
from ..runtime.tensor_files import load_tensors
from ..verify.tolerance import BITWISE, Tolerance, compare
from .common import AtolOption, BitwiseOption, MaxUlpOption, RtolOption, exit_with, print_check, tolerance_override

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


@app.command(
    "compare",
    short_help="Compare two tensor files, bit for bit or under a tolerance.",
    help=(
        "Compare two tensor files (lists of tensors written by torch.save or a runner's "
        "--outputs): bit-for-bit by default, or under --max-ulp N or --rtol R --atol A "
        "(torch.testing.assert_close's rule).\n\n"
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
        actual_tensors, expected_tensors = load_tensors(actual), load_tensors(expected)
        if len(actual_tensors) != len(expected_tensors):
            raise VerificationError(
                f"different numbers of tensors: {actual} holds {len(actual_tensors)}, {expected} holds "
                f"{len(expected_tensors)}"
            )
        comparisons = [
            (f"tensor[{i}]", compare(a, e, tolerance)) for i, (a, e) in enumerate(zip(actual_tensors, expected_tensors))
        ]
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    if not print_check("compare", comparisons):
        raise typer.Exit(EXIT_MISMATCH)

