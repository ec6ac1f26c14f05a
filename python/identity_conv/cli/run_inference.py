"""run_inference: run an AOTI package from Python, with its inputs validated
against the package's recorded spec, and verify the output bits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_MISMATCH
from ..ops import load_op_library
from ..package import read_package_spec
from ..runtime import load_package, make_random_inputs, to_package_device
from ..tensor_io import load_tensors, save_tensors
from ..verify import compare_tensor_lists
from .common import console, exit_with, print_bit_reports

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


@app.command(
    help=(
        "Run an AOTI package written by export_compile from Python and check the "
        "output bit-for-bit against the input (identity models).\n\n"
        "Inputs are checked against the shapes, dtype and device the package records "
        "before anything runs.\n\n"
        "Exit codes: 0 PASSED, 1 output bits differ, 2 usage, load or input error."
    )
)
def run_inference(
    model_path: Annotated[Path, typer.Argument(help="The .pt2 package.")] = Path("artifacts/model.pt2"),
    op_lib_path: Annotated[
        Optional[Path],
        typer.Argument(help="libidentity_conv_ops.so. Default: $IDENTITY_CONV_OPS_LIB, then build/."),
    ] = None,
    inputs: Annotated[
        Optional[Path],
        typer.Option(help="Read inputs from this file: a list of tensors saved with torch.save."),
    ] = None,
    outputs: Annotated[Optional[Path], typer.Option(help="Write the outputs to this file, the same way.")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random input used without --inputs.")] = 0,
) -> None:
    try:
        spec = read_package_spec(model_path)
        library = load_op_library(op_lib_path)
        console.print(f"loaded op library {library}")
        package = load_package(model_path, spec)
        if inputs is None:
            tensors = make_random_inputs(spec, seed)
            console.print(f"input: random (seed {seed})")
        else:
            tensors = to_package_device(load_tensors(inputs), spec)
            console.print(f"input: {inputs}")
        results = package.run(tensors)
        console.print(f"ran {model_path}: {len(results)} output(s)")
        if outputs is not None:
            save_tensors(outputs, results)
            console.print(f"wrote outputs to {outputs}")
        if not spec.is_identity:
            console.print("verify: skipped (the package does not declare an identity model)\nDONE")
            return
        reports = compare_tensor_lists(results, tensors)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    labels = [f"verify: output[{i}] vs input[{i}]" for i in range(len(reports))]
    if not print_bit_reports(list(zip(labels, reports))):
        raise typer.Exit(EXIT_MISMATCH)


def main() -> None:
    app()
