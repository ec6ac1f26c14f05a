"""inspect_package: print what an AOTI package written by export_compile records,
without loading it: inputs (with dynamic ranges), device, required ops and classes,
torch version and the compile host's CPU ISA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .common import console, exit_with, read_spec

app = typer.Typer(add_completion=False)


@app.command(
    help=(
        "Print what a package records: its inputs (dims, dynamic ranges, dtype), device, "
        "the custom ops and torchbind classes it needs, the op libraries that provide "
        "them, the torch version and the CPU ISA its kernels were compiled for. The "
        "package is not loaded.\n\nExit codes: 0 printed, 2 missing or unreadable package."
    )
)
def inspect_package(
    package: Annotated[Path, typer.Argument(help="The .pt2 package, or an .onnx file written by export_compile onnx.")] = Path("artifacts/model.pt2"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    try:
        spec = read_spec(package)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)
    if as_json:
        console.print(json.dumps({"package": str(package), **spec.to_json()}, indent=2))
        return
    table = Table(title=f"package {package}")
    table.add_column("field")
    table.add_column("value")
    for name, value in spec.describe():
        table.add_row(name, value)
    console.print(table)


def main() -> None:
    app()
