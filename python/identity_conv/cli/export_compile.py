"""export_compile: export the IdentityModel with torch.export, compile it with
AOTInductor into a .pt2 package, and verify the package against eager bit-for-bit."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.table import Table
from rich.text import Text

from ..errors import EXIT_MISMATCH, IdentityConvError
from ..pipeline import DEFAULT_RANGES, STAGES, BuildConfig, export_and_compile
from .common import console, exit_with, step_progress, verdict

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


class DType(str, Enum):
    float16 = "float16"
    bfloat16 = "bfloat16"
    float32 = "float32"
    float64 = "float64"


class Variant(str, Enum):
    functional = "functional"
    out = "out"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def _parse_range(flag: str, value: str) -> tuple[int, int]:
    """"1:64" -> (1, 64); a typer.BadParameter otherwise."""
    low, sep, high = value.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise typer.BadParameter(f"expected MIN:MAX with two integers, e.g. 1:64, got {value!r}", param_hint=flag)


def _check_range(param: typer.CallbackParam, value: str) -> str:
    _parse_range("--" + (param.name or "").replace("_", "-"), value)
    return value


@app.command(
    help=(
        "Export the four-layer IdentityModel (conv, torchbind class, custom op, conv) with "
        "torch.export, compile it with AOTInductor into a .pt2 package, and check the "
        "package's output bit-for-bit against eager.\n\n"
        "Exit codes: 0 package written and verified, 1 package bits differ from eager, "
        "2 usage, load, export or compile error."
    )
)
def export_compile(
    channels: Annotated[int, typer.Option(min=1, help="Channels of the input and of every layer.")] = 3,
    batch: Annotated[int, typer.Option(min=1, help="Batch size of the example input.")] = 1,
    height: Annotated[int, typer.Option(min=1, help="Height of the example input.")] = 224,
    width: Annotated[int, typer.Option(min=1, help="Width of the example input.")] = 224,
    dtype: Annotated[DType, typer.Option(help="Floating dtype of the model and its input.")] = DType.float32,
    device: Annotated[
        Device, typer.Option(help="Device to compile for. cuda needs a CUDA build of torch and a GPU.")
    ] = Device.cpu,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random example input.")] = 0,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the package.")] = Path(
        "artifacts/model.pt2"
    ),
    op_lib: Annotated[
        Optional[Path],
        typer.Option(
            help="Path of libidentity_conv_ops.so. Default: $IDENTITY_CONV_OPS_LIB, then build/.",
        ),
    ] = None,
    dynamic: Annotated[
        str,
        typer.Option(
            help="Comma-separated dims that may vary at run time: any of batch, height, width. "
            "The package then accepts any size in the dim's range.",
        ),
    ] = "",
    batch_range: Annotated[
        str, typer.Option(help="MIN:MAX of a dynamic batch.", callback=_check_range)
    ] = "{}:{}".format(*DEFAULT_RANGES["batch"]),
    height_range: Annotated[
        str, typer.Option(help="MIN:MAX of a dynamic height.", callback=_check_range)
    ] = "{}:{}".format(*DEFAULT_RANGES["height"]),
    width_range: Annotated[
        str, typer.Option(help="MIN:MAX of a dynamic width.", callback=_check_range)
    ] = "{}:{}".format(*DEFAULT_RANGES["width"]),
    variant: Annotated[
        Variant,
        typer.Option(
            help="Layer 3 of the model: functional (identity_conv_op returns a new tensor) or out "
            "(the mutable identity_conv_op_out writes a preallocated one).",
        ),
    ] = Variant.functional,
    show_graph: Annotated[bool, typer.Option(help="Print the exported graph.")] = True,
) -> None:
    if device is Device.cuda and not torch.cuda.is_available():
        exit_with(
            IdentityConvError(
                "--device cuda was requested, but torch.cuda.is_available() is false "
                f"(torch {torch.__version__}). Use --device cpu, or a machine with a GPU and a "
                "CUDA build of torch."
            )
        )
    config = BuildConfig(
        channels=channels,
        batch=batch,
        height=height,
        width=width,
        dtype=dtype.value,
        device=device.value,
        seed=seed,
        output=output,
        op_lib=op_lib,
        dynamic=tuple(name.strip() for name in dynamic.split(",") if name.strip()),
        variant=variant.value,
        ranges={
            "batch": _parse_range("--batch-range", batch_range),
            "height": _parse_range("--height-range", height_range),
            "width": _parse_range("--width-range", width_range),
        },
    )
    try:
        with step_progress(len(STAGES)) as on_stage:
            result = export_and_compile(config, on_stage=on_stage)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    if show_graph:
        # Plain lines, not a panel: a panel would crop the node targets.
        console.rule("exported graph")
        console.print(result.graph)
        console.rule()

    table = Table(title="export_compile summary")
    table.add_column("item")
    table.add_column("value")
    for name, seconds in result.timings.items():
        table.add_row(f"stage: {name}", f"{seconds:.2f} s")
    table.add_row("input spec", f"{result.spec.inputs[0].shape_str()} {dtype.value} on {device.value}")
    table.add_row("custom ops", ", ".join(result.calls.ops))
    table.add_row("torchbind classes", ", ".join(result.calls.classes))
    table.add_row("op library", str(result.op_library))
    table.add_row("package", str(result.package_path))
    table.add_row("package size", f"{result.package_path.stat().st_size / 1e6:.2f} MB")
    for label, report in result.checks:
        table.add_row(f"{label} (bitwise)", str(report))
    console.print(table)
    console.print(Text("verify eager vs package: ").append_text(verdict(result.passed)))
    if not result.passed:
        raise typer.Exit(EXIT_MISMATCH)


def main() -> None:
    app()
