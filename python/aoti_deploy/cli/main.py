"""aoti-deploy: one command, one subcommand per task. Each subcommand stays in its own
module (export_compile.py holds `export`, run_inference.py `run`, ...), which names it;
this module only joins them, as typer's add_typer does without a name. The console
script, aoti_deploy.cli:main, is in __init__.py."""

from __future__ import annotations

import typer

from . import (
    benchmark,
    bundle,
    compare_tensors,
    export_compile,
    fleet,
    inspect_package,
    run_inference,
    serve_triton,
    train_identity,
    triton_repository,
    verify_matrix,
)

app = typer.Typer(
    name="aoti-deploy",
    help=(
        "Export a PyTorch model with custom C++/CUDA ops, compile it with AOTInductor, and run it "
        "from Python, from a C++ binary with no Python, or from Triton Inference Server, verified "
        "bit for bit. One subcommand per task; each has its own --help."
    ),
    add_completion=True,
    no_args_is_help=True,
    rich_markup_mode="rich",
)

# In the order of the data path: build a package, run and check it, ship and serve it,
# measure it; then the demo's training.
for _module in (
    export_compile,
    run_inference,
    inspect_package,
    compare_tensors,
    verify_matrix,
    bundle,
    triton_repository,
    serve_triton,
    fleet,
    benchmark,
    train_identity,
):
    app.add_typer(_module.app)
