"""aoti-deploy inspect: print what an AOTI package written by export_compile records,
without loading it: inputs and outputs (with dynamic ranges), device, required ops and classes,
torch version and the compile host's CPU ISA; for a deploy bundle, also its signature
and each file's digest against the signed one."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..package.bundle import is_bundle, read_layout
from ..package.bundle_report import BundleReport, describe_bundle
from ..runtime.trust import FLAG_SOURCE, TrustPolicy, open_model
from .common import console, exit_with, option, read_spec

app = typer.Typer(add_completion=False)


@app.command(
    "inspect",
    short_help="Print what a package or a bundle records, without loading it.",
    help=(
        "Print what a package records: its inputs and outputs (dims, dynamic ranges, dtype), device, "
        "the custom ops and torchbind classes it needs, the op libraries that provide "
        "them, the torch version and the CPU ISA its kernels were compiled for. The "
        "package is not loaded.\n\n"
        "For a bundle folder, also whether it is signed (model.sig, with the signing key's hint) "
        "and each file's SHA-256: as signed, differs from the signature, not in the signature, or "
        "missing. The signature is only read, not verified, unless --trusted-key PUB.pem is given: "
        "then the bundle is verified as the runners verify it, and any failure exits 2.\n\n"
        "Exit codes: 0 printed, 2 missing or unreadable package or bundle, or a failed verification."
    )
)
def inspect_package(
    package: Annotated[
        Path, typer.Argument(help="The .pt2 package, a bundle folder, or an .onnx file written by export_compile onnx.")
    ] = Path("artifacts/model.pt2"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    trusted_key: Annotated[Optional[Path], option(
        "Verify the bundle with this PEM EC public key (as the runners do) before showing it.",
        show_default=False,
    )] = None,
) -> None:
    report: BundleReport | None = None
    status = None
    with ExitStack() as cleanup:
        try:
            if trusted_key is not None:
                opened = cleanup.enter_context(open_model(package, TrustPolicy(trusted_key, FLAG_SOURCE)))
                spec, status = opened.spec, opened.status
                # The verified copy's files, named as the bundle's.
                report = describe_bundle(read_layout(opened.copy_dir, shown=package), opened.signature, str(trusted_key))
            elif is_bundle(package):
                layout = read_layout(package)
                spec = read_spec(layout.package)
                report = describe_bundle(layout)
            else:
                spec = read_spec(package)
        except Exception as error:  # typed errors keep their code; anything else exits 2
            exit_with(error)
    if as_json:
        document = {"package": str(package), **spec.to_json()}
        if report is not None:
            document["bundle"] = {**report.to_json(), "status": status}
        console.print(json.dumps(document, indent=2))
        return
    if status:
        console.print(status)
    table = Table(title=f"package {package}")
    table.add_column("field")
    table.add_column("value")
    for name, value in spec.describe() + (report.rows() if report is not None else []):
        table.add_row(name, value)
    console.print(table)

