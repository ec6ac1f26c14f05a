"""What both CLIs share: consoles, and turning a typed error into a message and an
exit code."""

from __future__ import annotations

import sys
import warnings
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_USAGE, IdentityConvError

# Markup is off: messages carry paths and shapes such as "[tensor, ...]" that rich
# would otherwise take for style tags. Styles are passed explicitly instead. Lines
# are not wrapped, so scripts can grep a whole report line.
# torch warns about its own deprecated internals (pytree LeafSpec, jit.script_method)
# while exporting and compiling; that is noise to a user of these CLIs.
warnings.filterwarnings("ignore", message=r".*LeafSpec.*deprecated", category=FutureWarning)
warnings.filterwarnings("ignore", message=r".*torch.jit.script_method.*deprecated", category=DeprecationWarning)

# Piped output (logs, CI) gets room for the wide tables; a terminal keeps its width.
_PIPED_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, markup=False, soft_wrap=True, width=_PIPED_WIDTH)
err_console = Console(stderr=True, highlight=False, markup=False, soft_wrap=True, width=_PIPED_WIDTH)


def exit_with(error: Exception) -> NoReturn:
    """Print ``error`` on stderr and exit with its code: a toolkit error's own code,
    2 for anything unexpected (never 1, which means "bits differ")."""
    if isinstance(error, IdentityConvError):
        err_console.print(Text.assemble(("error: ", "bold red"), str(error)), soft_wrap=True)
        raise typer.Exit(error.exit_code)
    err_console.print(
        Text.assemble(("error: ", "bold red"), f"unexpected {type(error).__name__}: {error}"), soft_wrap=True
    )
    raise typer.Exit(EXIT_USAGE)


def verdict(passed: bool) -> Text:
    return Text("PASSED", style="bold green") if passed else Text("FAILED", style="bold red")
