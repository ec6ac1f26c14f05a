"""Command-line entry points: thin layers that parse options, call the stage
functions and print. aoti-deploy is the one command (main.py joins one subcommand per
module); export_compile and run_inference are also console scripts of their own."""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    """The aoti-deploy console script. `run` goes straight to its own module, as the
    run_inference script does: no other subcommand's module, nor torch, is imported
    before the run needs it, and the process ends without teardown. Every other
    subcommand goes through the one app in main.py."""
    if sys.argv[1:2] == ["run"]:
        from .common import run_without_teardown
        from .run_inference import app as run_app

        run_without_teardown(run_app, args=sys.argv[2:], prog_name=f"{Path(sys.argv[0]).name} run")  # no return
    from .main import app

    app()
