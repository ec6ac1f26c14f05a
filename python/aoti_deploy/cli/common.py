"""What the CLIs share: consoles, turning a typed error into a message and an exit
code, and ending a run without teardown. Nothing here imports torch at module level:
run_inference --help loads this module, and must start without torch (the stages are
imported where used)."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, List, NoReturn, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import EXIT_USAGE, AotiDeployError
from ..locate import runner_path
from ..runtime import is_onnx_path


def _flags_take_no_value() -> None:
    """typer 0.29 shows a type beside every option, flags too (``--bitwise <bool>``),
    and ``--bitwise true`` then fails: a flag takes no value, so its help shows none."""
    option = getattr(typer.core, "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_flags_take_no_value", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if getattr(self, "is_flag", False) and not getattr(self, "count", False) else shown(self, ctx)

    display_type_rich._flags_take_no_value = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


_flags_take_no_value()

if TYPE_CHECKING:
    from ..package.spec import PackageSpec
    from ..verify.tolerance import Comparison, Tolerance

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


# Options shared by the CLIs that drive both runtimes.
# Both default to this checkout's build, from any folder (see locate.py).
def option(help: str, *param_decls: str, panel: str | None = None, **kwargs: Any) -> Any:
    """A typer option with its help, in ``panel`` of --help (default: Options)."""
    return typer.Option(*param_decls, help=help, rich_help_panel=panel, **kwargs)


RunnerOption = Annotated[
    Optional[Path],
    typer.Option(
        help="The C++ runner. Default: aoti_runner in $AOTI_DEPLOY_BUILD_DIR, else in this checkout's build/ "
        "(built by ./scripts/setup.sh).",
        show_default=False,
    ),
]
OpLibOption = Annotated[
    Optional[Path],
    typer.Option(
        help="libidentity_conv_ops.so. Default: $AOTI_DEPLOY_OPS_LIB, else the one in $AOTI_DEPLOY_BUILD_DIR "
        "or this checkout's build/."
    ),
]

FakeModuleOption = Annotated[
    Optional[List[str]],
    typer.Option(
        help="Module to import after the op libraries load: one that registers their fakes "
        "(torch.library.register_fake) or Python-only ops. Repeatable.",
    ),
]
# The rule of a comparison (see verify/tolerance.py); each command says which check
# these override and what its default is.
TOLERANCE_PANEL = "Tolerance (one of --bitwise, --max-ulp, --rtol/--atol)"
BitwiseOption = Annotated[
    bool, typer.Option("--bitwise", help="Demand the same bits.", rich_help_panel=TOLERANCE_PANEL, show_default=False)
]
MaxUlpOption = Annotated[
    Optional[int],
    typer.Option(
        min=0,
        help="Pass if every element is within this many ULP (units in the last place) of its reference; "
        "0 is --bitwise. A poor rule near zero: 1e-30 against 0 is millions of ULP apart.",
        rich_help_panel=TOLERANCE_PANEL,
        show_default=False,
    ),
]
RtolOption = Annotated[
    Optional[float],
    typer.Option(
        min=0.0,
        help="Relative tolerance: pass if |actual - reference| <= atol + rtol * |reference| everywhere "
        "(torch.testing.assert_close's rule; NaN must face NaN, inf the same inf). Give --atol too.",
        rich_help_panel=TOLERANCE_PANEL,
        show_default=False,
    ),
]
AtolOption = Annotated[
    Optional[float],
    typer.Option(min=0.0, help="Absolute tolerance, with --rtol.", rich_help_panel=TOLERANCE_PANEL, show_default=False),
]


def tolerance_override(bitwise: bool, max_ulp: int | None, rtol: float | None, atol: float | None) -> Tolerance | None:
    """The rule the tolerance options ask for, or None when none was given."""
    from ..verify.tolerance import tolerance_from_options

    return tolerance_from_options(bitwise=bitwise, max_ulp=max_ulp, rtol=rtol, atol=atol, default=None)


def read_spec(path: Path) -> PackageSpec:
    """The recorded spec of a .pt2 package or, by its suffix, of an .onnx file."""
    if is_onnx_path(path):
        from ..runtime.onnx_runtime import read_onnx_spec

        return read_onnx_spec(path)
    from ..package.archive import read_package_spec

    return read_package_spec(path)


def require_runner(runner: Path | None) -> Path:
    """The C++ runner given with --runner, else this checkout's; a clear error when
    it has not been built."""
    return runner_path(runner)


def exit_with(error: Exception, flags: Mapping[str, str] | None = None) -> NoReturn:
    """Print ``error`` on stderr and exit with its code: a toolkit error's own code,
    2 for anything unexpected (never 1, which means "bits differ"). ``flags`` maps
    the API's words in a message (``allow_python_ops=True``) to the command's own
    (``--allow-python-ops``)."""
    if isinstance(error, AotiDeployError):
        message = str(error)
        for words, flag in (flags or {}).items():
            message = message.replace(words, flag)
        err_console.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
        raise typer.Exit(error.exit_code)
    err_console.print(
        Text.assemble(("error: ", "bold red"), f"unexpected {type(error).__name__}: {error}"), soft_wrap=True
    )
    raise typer.Exit(EXIT_USAGE)


def run_without_teardown(app: typer.Typer, **kwargs: Any) -> NoReturn:
    """Run ``app`` (``kwargs`` as typer takes them: ``args``, ``prog_name``), then end
    the process without Python's teardown. Once a run is done (its outputs written, the
    bundle copy and the loader's extracted files removed by its ExitStack), teardown
    would only unload torch module by module and run its static destructors: 0.4 s on
    the demo package here, for nothing. The exit code is the command's."""
    try:
        app(**kwargs)
        code: object = 0
    except SystemExit as done:
        code = done.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what SystemExit does with a message
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to deliver
            pass
    logging.shutdown()
    # C stdio too (an op library's printf into a pipe), as the C++ runner's fflush(nullptr).
    ctypes.CDLL(None).fflush(None)
    os._exit(code or 0)


def verdict(passed: bool) -> Text:
    return Text("PASSED", style="bold green") if passed else Text("FAILED", style="bold red")


def put_working_folder_on_path() -> None:
    """Resolve --model and --fake-module names from the working folder first, as
    ``python -m`` does. The CLIs only: the API never changes ``sys.path`` (a folder
    named like an installed package, e.g. a Triton repository in ``triton/``, would
    shadow it)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _without_runtime_echo(text: str) -> str:
    """``text`` less the AOTI runtime's echo of a failed run: a line "Error: <what>"
    (its message, or the failed call when the error came from a call out of the
    wrapper) and the backtrace lines a message may run on with (as
    cpp_runtime/core/aoti_package.cpp's StderrHold)."""
    kept, in_echo = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("Error: "):
            in_echo = True
        elif in_echo and (line.startswith(("Exception raised from", "frame #")) or not line.strip()):
            pass
        else:
            in_echo = False
            kept.append(line)
    return "".join(kept)


@contextmanager
def held_stderr() -> Iterator[None]:
    """Hold this process's stderr (fd 2) in memory for one package run, and give it
    back without the "Error: ..." echo that the AOTI runtime compiled into every
    package prints before it raises: the CLI reports that error in its own line.
    Anything else the run printed passes on. For a single-threaded CLI only: fd 2 is
    the whole process's."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    held = tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    error: BaseException | None = None
    try:
        yield
    except BaseException as raised:
        error = raised
        raise
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        held.seek(0)
        text = held.read().decode("utf-8", "replace")
        held.close()
        if error is not None:
            text = _without_runtime_echo(text)
        sys.stderr.write(text)
        sys.stderr.flush()


@contextmanager
def step_progress(total: int) -> Iterator[Callable[[str], None]]:
    """A progress bar over ``total`` named steps. Yields the callback a stage
    function calls as each step starts; the bar advances as the next one begins.
    On an error the bar clears itself, so the error is not printed under a stale
    spinner line."""
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    )
    progress.start()
    try:
        task = progress.add_task("starting", total=total)
        started: list[str] = []

        def on_step(name: str) -> None:
            if started:
                progress.advance(task)
            started.append(name)
            if len(started) > total:  # a step ran again (a compile without a dropped setting)
                progress.update(task, total=len(started))
            progress.update(task, description=name)

        yield on_step
        progress.update(task, completed=max(total, len(started)), description="done")
    except BaseException:
        progress.live.transient = True
        # The live display only: Progress.stop would add a blank line on a pipe.
        progress.live.stop()
        raise
    progress.stop()


def print_check(name: str, comparisons: list[tuple[str, Comparison]]) -> bool:
    """Print one "label (rule): report" line per comparison, then "name: verdict line";
    True if the check passed."""
    from ..verify.tolerance import FAILED, list_verdict, verdict_line

    for label, comparison in comparisons:
        console.print(f"{label} ({comparison.rule}): {comparison}")
    results = [comparison for _, comparison in comparisons]
    passed = list_verdict(results) != FAILED
    line = verdict_line(results)
    console.print(Text(f"{name}: ").append(line, style="bold green" if passed else "bold red"))
    return passed
