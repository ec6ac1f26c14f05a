"""aoti-deploy bundle: write a deploy bundle from a package (or from another bundle): model.pt2,
exactly the op libraries it records and, with --sign-key, an OpenSSF Model Signing
signature (model.sig) that both runners verify with --trusted-key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..package.bundle import SIGNATURE_NAME, file_digests, read_layout
from ..package.bundle_writer import write_bundle
from .common import console, exit_with, option

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


def _size(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"


@app.command(
    "bundle",
    short_help="Write a deploy bundle (model.pt2 and its op libraries), signed with --sign-key.",
    help=escape(
        "Write a deploy bundle: a folder holding model.pt2, exactly the op libraries the package "
        "records (copied), and, with --sign-key, model.sig, an OpenSSF Model Signing signature "
        "(the model-signing library's key mode; needs pip install -e '.[sign]'). run_inference and "
        "aoti_runner take the folder wherever they take a package, and load its op libraries from it; "
        "with --trusted-key PUB.pem (or $AOTI_DEPLOY_TRUSTED_KEY) they verify it first and run "
        "only a verified private copy.\n\n"
        "Make a key pair (EC, P-256; P-384 and P-521 work too; Ed25519 and RSA do not):\n\n"
        "  openssl ecparam -name prime256v1 -genkey -noout -out key.pem\n\n"
        "  openssl ec -in key.pem -pubout -out key.pub\n\n"
        "Sign with key.pem; give servers key.pub. To sign an existing bundle in place: "
        "bundle DIR --output DIR --sign-key key.pem. The bundle is written beside --output first and "
        "then put in place, so a bundle already there is replaced whole; a folder that is not a "
        "bundle is never replaced.\n\n"
        "Exit codes: 0 written, 2 usage, package, library, key or signing error (nothing is written then)."
    )
)
def bundle(
    package: Annotated[
        Path,
        typer.Argument(
            help="The .pt2 package, or a bundle folder (its package and op libraries are taken; its model.sig is not).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="The bundle folder to write.", show_default=False),
    ],
    op_lib: Annotated[
        Optional[List[Path]],
        typer.Option(
            help="An op library to put in the bundle (repeatable), matched to the package's recorded ones by "
            "file name. Default for libidentity_conv_ops.so: $AOTI_DEPLOY_OPS_LIB, else the one in "
            "$AOTI_DEPLOY_BUILD_DIR or this checkout's build/; any other recorded library must be given.",
        ),
    ] = None,
    sign_key: Annotated[Optional[Path], option(
        "Sign the bundle with this PEM EC private key (P-256, P-384 or P-521) into model.sig.",
        show_default=False,
    )] = None,
) -> None:
    try:
        written = write_bundle(package, list(op_lib or []), output, sign_key)
        layout = read_layout(written)
        files = file_digests(written)
        signature = None
        if layout.signed:
            from ..package.signature_file import read_signature

            signature = read_signature(written / SIGNATURE_NAME)
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error)

    table = Table(title=f"bundle {written}")
    table.add_column("file")
    table.add_column("size", justify="right")
    table.add_column("sha256")
    for found in files:
        table.add_row(found.name, _size(found.size), found.sha256)
    console.print(table)
    if signature is None:
        console.print("signature: not signed (pass --sign-key KEY.pem to sign)")
    else:
        console.print(
            f"signature: {SIGNATURE_NAME}, {len(signature.files)} files signed with {sign_key} "
            f"(key hint {signature.key_hint})"
        )
    console.print(f"wrote bundle {written}")

