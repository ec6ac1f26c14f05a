"""The benchmark of any package on its own model: eager, torch.compile (default and
max-autotune), the package in the Python runtime and in the C++ runner (1 thread and
all threads), ONNX Runtime on an ONNX export of the same model, optionally Triton, on
the same inputs in one run, at batch 1 and a larger batch. Stage functions only:
``Package.benchmark`` returns the result, ``aoti-deploy bench --package`` prints it."""

from __future__ import annotations

import math
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..errors import AotiDeployError, InputError
from .plots import label_bar, latency_figure, save_latency_figure
from .results import Latency, finite_or_none, machine_facts
from .timing import time_samples

if TYPE_CHECKING:
    from ..api import Package
    from ..models.call import CallInputs

EAGER = "eager"
COMPILE = "torch.compile"
COMPILE_MAX = "torch.compile max-autotune"
PYTHON = "AOTI Python runtime"
ONNX = "ONNX Runtime"
TRITON = "Triton"


def cpp_row(threads: int) -> str:
    return f"AOTI C++ runner, {threads} thread{'s' if threads > 1 else ''}"


@dataclass(frozen=True)
class BenchRow:
    """One path at one batch: latency (µs), throughput (samples/s) and each as a
    ratio to the fastest path at that batch (1.0 is the fastest; p50 and p99 above
    1 are slower, throughput below 1 is lower). ``skipped`` says why a path has no
    numbers; ``note`` says how it ran (threads, compile time, ...). Timed in rounds,
    the figures are the medians of the rounds' and ``round_p50s_us`` holds each
    round's p50, in order."""

    path: str
    batch: int
    p50_us: float | None = None
    p99_us: float | None = None
    throughput: float | None = None
    p50_ratio: float | None = None
    p99_ratio: float | None = None
    throughput_ratio: float | None = None
    skipped: str = ""
    note: str = ""
    round_p50s_us: tuple[float, ...] = ()


@dataclass
class BenchmarkResult:
    """Every path on the same inputs in one run: ``rows`` per batch, in path order,
    with the machine, thread count and what was left out and why. With ``rounds``
    above 1 every path was timed once per round, the paths in turn within each round."""

    rows: list[BenchRow]
    batches: tuple[int, ...]
    iterations: int
    threads: int
    rounds: int = 1
    torch_version: str = torch.__version__
    machine: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def row(self, path: str, batch: int | None = None) -> BenchRow | None:
        batch = self.batches[0] if batch is None else batch
        return next((r for r in self.rows if r.path == path and r.batch == batch), None)

    def paths(self) -> list[str]:
        return list(dict.fromkeys(r.path for r in self.rows))

    @property
    def p50_us(self) -> dict[str, float]:
        """p50 per measured path at the first batch."""
        return {r.path: r.p50_us for r in self.rows if r.batch == self.batches[0] and r.p50_us is not None}

    @property
    def p99_us(self) -> dict[str, float]:
        return {r.path: r.p99_us for r in self.rows if r.batch == self.batches[0] and r.p99_us is not None}

    def speedup(self, path: str, batch: int | None = None) -> float | None:
        """Eager's p50 over ``path``'s at ``batch`` (above 1: faster than eager)."""
        eager, other = self.row(EAGER, batch), self.row(path, batch)
        if eager is None or other is None or eager.p50_us is None or other.p50_us is None:
            return None
        return eager.p50_us / other.p50_us

    def table(self) -> str:
        """A Markdown table: batch, path, p50, p99, throughput, each against the
        fastest at that batch; skipped paths with the reason."""
        lines = ["| batch | path | p50 (µs) | p99 (µs) | throughput (/s) | p50 / fastest | p99 / fastest | "
                 "throughput / best | note |", "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in self.rows:
            if r.skipped:
                lines.append(f"| {r.batch} | {r.path} | - | - | - | - | - | - | skipped: {r.skipped} |")
                continue
            lines.append(f"| {r.batch} | {r.path} | {r.p50_us:.1f} | {r.p99_us:.1f} | {r.throughput:.0f} | "
                         f"{r.p50_ratio:.2f}x | {r.p99_ratio:.2f}x | {r.throughput_ratio:.2f}x | {r.note} |")
        return "\n".join(lines)

    def markdown(self) -> str:
        head = (f"Package benchmark: {self.machine.get('cpu', '?')}, {self.machine.get('cores', '?')} cores, "
                f"torch {self.torch_version}, {self.threads} thread(s), {self.iterations} timed runs per path "
                f"and batch{self._rounds_text()}.\n\n")
        notes = "".join(f"\n- {note}" for note in self.notes)
        return head + self.table() + ("\n" + notes if notes else "") + "\n"

    def _rounds_text(self) -> str:
        return (f" in each of {self.rounds} rounds, the paths in turn; every figure is the median of the rounds'"
                if self.rounds > 1 else "")

    def to_json(self) -> dict[str, Any]:
        return {"batches": list(self.batches), "iterations": self.iterations, "threads": self.threads,
                "rounds": self.rounds,
                "torch_version": self.torch_version, "machine": self.machine, "notes": self.notes,
                "rows": [asdict(r) for r in self.rows]}


@dataclass(frozen=True)
class _Timing:
    p50: float
    p99: float
    mean: float
    round_p50s: tuple[float, ...] = ()


def _time(fn: Callable[[], object], iterations: int, warmup: int) -> _Timing:
    samples = time_samples(fn, iterations, warmup)
    latency = Latency.of(samples)
    return _Timing(latency.p50, latency.p99, statistics.fmean(samples))


def _median_timing(timings: list[_Timing]) -> _Timing:
    """The rounds of one path as one: the median of each figure."""
    return _Timing(statistics.median(t.p50 for t in timings), statistics.median(t.p99 for t in timings),
                   statistics.median(t.mean for t in timings),
                   tuple(t.p50 for t in timings) if len(timings) > 1 else ())


class CompileTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise CompileTimeout in this (main) thread after ``seconds``; elsewhere no bound."""
    import threading

    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise CompileTimeout(f"compile took over {seconds:.0f} s (the bound)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def batch_support(spec: Any, batch: int) -> str:
    """'' when every tensor input takes ``batch`` at dim 0, else why not."""
    for k, tensor in enumerate(spec.inputs):
        name = tensor.name or f"input {k}"
        if not tensor.dims:
            return f"{name} is a scalar, with no batch dim"
        if not tensor.dims[0].contains(batch):
            return (f"the package is not dynamic in batch: dim 0 of {name} takes {tensor.dims[0].wanted()}; "
                    "export with a dynamic batch dim (dynamic_shapes={...: {0: Dim('batch', ...)}}) to measure it")
    return ""


def at_batch(call: "CallInputs", batch: int) -> "CallInputs":
    """The same call with every tensor's dim 0 resized to ``batch`` (rows repeated
    in order, so an attention mask keeps its padding pattern)."""
    def resize(x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0 or x.shape[0] == batch:
            return x
        return x[torch.arange(batch) % x.shape[0]].contiguous()

    return call.map_tensors(resize)


def _close(actual: list[Any], expected: list[torch.Tensor]) -> str:
    """'' when ONNX Runtime's outputs match eager's under torch.testing's defaults."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs against eager's {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        try:
            torch.testing.assert_close(torch.as_tensor(a), e.detach().cpu(), check_dtype=False)
        except AssertionError as error:
            return f"output {k} differs from eager: {str(error).splitlines()[0]}"
    return ""


def _onnx_session(model: torch.nn.Module, call: "CallInputs", folder: Path, threads: int) -> tuple[Any, Any, str]:
    """An ONNX export of ``model`` at this call's shapes, in an onnxruntime session
    with ``threads`` intra-op threads and its default graph optimizations: the
    toolkit's own export where it takes the model (positional tensor arguments),
    else torch.onnx.export(dynamo=True). Returns (session, feed, how)."""
    import onnxruntime

    from ..compiler.onnx_export import export_onnx

    path = folder / f"model_b{call.tensors()[0].shape[0]}.onnx"
    positional = not call.kwargs and all(isinstance(a, torch.Tensor) for a in call.args)
    if positional:
        export_onnx(model, list(call.args), path)
        how = "the toolkit's ONNX export"
    else:
        import logging

        logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
        program = torch.onnx.export(model, call.args, kwargs=call.kwargs, dynamo=True, optimize=True, verbose=False)
        program.save(str(path))
        how = "torch.onnx.export(dynamo=True)"
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    tensors = call.tensors()
    if len(names) != len(tensors):  # the exporter drops inputs the graph does not read
        by_name = {**{k: v for k, v in call.kwargs.items() if isinstance(v, torch.Tensor)}}
        feed = {name: by_name[name].numpy() for name in names if name in by_name}
    else:
        feed = {name: x.numpy() for name, x in zip(names, tensors)}
    return session, feed, how


def benchmark_package(
    package: "Package",
    call: "CallInputs",
    model: torch.nn.Module | None,
    *,
    batches: tuple[int, ...] = (1, 8),
    iterations: int = 100,
    warmup: int = 10,
    rounds: int = 1,
    threads: int | None = None,
    compile: bool = True,
    max_autotune: bool = True,
    compile_timeout: float = 600.0,
    cpp: bool = True,
    onnx: bool | None = None,
    triton: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> BenchmarkResult:
    """Time every path on ``call`` resized to each batch; see BenchmarkResult.

    A path that cannot run gets a row with ``skipped`` saying why (no eager model,
    a package static in batch, a compile over ``compile_timeout`` seconds, a model
    that does not export to ONNX, the ONNX extra missing). Never raises for one
    path; raises InputError for bad arguments.

    With ``rounds`` above 1, each batch's paths are timed in turn, once per round
    (on a host whose speed drifts, a drift then reaches every path alike), and each
    figure is the median of the rounds'; set-up (compiles, the ONNX export) is done
    once."""
    from ..runtime.onnx_extra import missing_onnx_packages

    if iterations < 1 or warmup < 0 or rounds < 1 or not batches or min(batches) < 1:
        raise InputError(f"iterations must be >= 1 (given {iterations}), warmup >= 0 (given {warmup}), rounds >= 1 "
                         f"(given {rounds}) and every batch >= 1 (given {list(batches)})")
    step = on_step or (lambda _: None)
    threads = threads or torch.get_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    if model is not None and isinstance(model, torch.nn.Module) and not isinstance(model, torch.fx.GraphModule):
        model = model.eval()
    if onnx is None:
        onnx = not missing_onnx_packages()
    onnx_missing = ", ".join(missing_onnx_packages())
    notes = [f"Python paths (eager, torch.compile, the Python runtime) and ONNX Runtime: {threads} intra-op "
             "thread(s); the C++ runner: timed inside its own process at 1 and at all threads."]
    rows: list[BenchRow] = []
    compiled: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="aoti_deploy_bench_") as folder:
            for batch in batches:
                measured: dict[str, tuple[_Timing | None, str, str]] = {}  # path -> (timing, skipped, note)
                unsupported = batch_support(package.spec, batch)
                if unsupported:
                    notes.append(f"batch {batch}: {unsupported}")
                    continue
                sized = at_batch(call, batch)
                tensors = package.flat_inputs(sized.args, sized.kwargs)
                eager_outputs: list[torch.Tensor] | None = None
                timings: dict[str, list[_Timing]] = {}
                round_text = ""

                def record(path: str, fn: Callable[[], _Timing]) -> None:
                    if measured.get(path, (None, "", ""))[1]:
                        return  # not timed (said before the rounds), or it failed in an earlier round
                    step(f"batch {batch}: {path}{round_text}")
                    try:
                        timings.setdefault(path, []).append(fn())
                    except (_Skip, AotiDeployError) as skip:  # the runner's failure names itself
                        measured[path] = (None, str(skip).splitlines()[0][:240], "")

                # The paths that are not timed, and why: said once, before the rounds.
                if model is None:
                    for path in (EAGER, COMPILE, COMPILE_MAX, ONNX):
                        measured[path] = (None, "no eager model given (pass model=..., or --model on the CLI)", "")
                else:
                    from ..models.user import flatten_outputs

                    with torch.no_grad():
                        eager_outputs = flatten_outputs(sized.call(model))
                    for path, wanted in ((COMPILE, compile), (COMPILE_MAX, compile and max_autotune)):
                        if not wanted:
                            measured[path] = (None, "not requested", "")
                    if compile:  # each batch's torch.compile rows compile a static graph of their own
                        torch._dynamo.reset()
                        compiled.pop(COMPILE, None)
                        compiled.pop(COMPILE_MAX, None)
                    if not onnx:
                        measured[ONNX] = (None, f"the ONNX extra is not installed ({onnx_missing})"
                                          if onnx_missing else "not requested", "")
                if triton:
                    measured[TRITON] = (None, "not timed for a package: this benchmark starts no server (serve "
                                        "it with aoti-deploy triton-repository and aoti-deploy serve)", "")
                runtime = package._runtime()
                for round_number in range(1, rounds + 1):
                    round_text = f", round {round_number}/{rounds}" if rounds > 1 else ""
                    if model is not None:
                        with torch.no_grad():
                            record(EAGER, lambda: _time(lambda: sized.call(model), iterations, warmup))
                            for path, mode in ((COMPILE, None), (COMPILE_MAX, "max-autotune")):
                                record(path, lambda: _time_compiled(compiled, path, model, mode, sized, iterations,
                                                                    warmup, compile_timeout))
                        record(ONNX, lambda: _time_onnx(model, sized, Path(folder), threads, iterations, warmup,
                                                        eager_outputs, compiled))
                    record(PYTHON, lambda: _time(lambda: runtime.run(tensors), iterations, warmup))
                    if cpp:
                        for n in dict.fromkeys((1, threads)):
                            def run_cpp(n: int = n) -> _Timing:
                                data = package._bench_cpp(tensors, iterations, warmup, intra_op_threads=n)
                                return _Timing(float(data["p50_us"]), float(data["p99_us"]), float(data["mean_us"]))
                            record(cpp_row(n), run_cpp)
                # Each timed path's rounds as one row; the compiles' and ONNX's notes from their first call.
                note_keys = {COMPILE: f"{COMPILE} note", COMPILE_MAX: f"{COMPILE_MAX} note",
                             ONNX: f"onnx note b{batch}"}
                for path, series in timings.items():
                    if path not in measured:  # a path that failed in a later round keeps its reason
                        note = compiled.get(note_keys[path], "") if path in note_keys else ""
                        measured[path] = (_median_timing(series), "", note)
                rows.extend(_rows(batch, measured))
    finally:
        torch.set_num_threads(previous_threads)
    return BenchmarkResult(rows, tuple(b for b in batches), iterations, threads, rounds=rounds,
                           machine=machine_facts(), notes=notes)


class _Skip(Exception):
    """A path that cannot run here; the message is the row's reason."""


def _time_compiled(cache: dict[str, Any], path: str, model: torch.nn.Module, mode: str | None, call: "CallInputs",
                   iterations: int, warmup: int, timeout: float) -> _Timing:
    """torch.compile's first call at this batch (the compile) bounded by ``timeout``
    seconds, then timed; in later rounds only timed. A failure or a timeout is a
    skip with the reason. The caller resets Dynamo and drops both compiled paths
    at each new batch, so each batch compiles its own static graph; within a batch
    the two modes keep their own entries in Dynamo's cache (it guards on the
    backend), so a later round compiles nothing."""
    if cache.get(f"{path} failed"):
        raise _Skip(cache[f"{path} failed"])
    fn = cache.get(path)
    if fn is None:
        fn = torch.compile(model, mode=mode)
        started = time.perf_counter()
        try:
            with _time_limit(timeout):
                call.call(fn)
        except Exception as error:  # Dynamo and Inductor raise many types; the row says which
            cache[f"{path} failed"] = reason = (str(error) if isinstance(error, CompileTimeout)
                                                else f"{type(error).__name__}: {str(error).splitlines()[0][:160]}")
            raise _Skip(reason) from error
        cache[path] = fn
        cache[f"{path} note"] = f"first call (compile) {time.perf_counter() - started:.1f} s"
    return _time(lambda: call.call(fn), iterations, warmup)


def _time_onnx(model: torch.nn.Module, call: "CallInputs", folder: Path, threads: int, iterations: int, warmup: int,
               eager: list[torch.Tensor] | None, cache: dict[str, Any]) -> _Timing:
    """ONNX Runtime on this call: exported, run once and checked against eager on the
    first call at this batch (the session and its note kept in ``cache``), then timed."""
    batch = call.tensors()[0].shape[0]
    if f"onnx b{batch}" not in cache:
        try:
            session, feed, how = _onnx_session(model, call, folder, threads)
        except Exception as error:  # the exporters raise many types; the row says why
            from ..compiler.onnx_export import _last_line

            raise _Skip(f"the model does not export to ONNX: {_last_line(error)[:200]}") from error
        try:
            outputs = session.run(None, feed)
        except Exception as error:  # onnxruntime's own error types; the row says why
            raise _Skip(f"ONNX Runtime could not run the export: {type(error).__name__}: "
                        f"{str(error).splitlines()[0][:200]}") from error
        differs = _close(outputs, eager or [])
        cache[f"onnx b{batch}"] = (session, feed)
        cache[f"onnx note b{batch}"] = (f"{how}, static shapes; "
                                        + (differs or "outputs match eager (torch.testing defaults)"))
    session, feed = cache[f"onnx b{batch}"]
    return _time(lambda: session.run(None, feed), iterations, warmup)


def _rows(batch: int, measured: Mapping[str, tuple[_Timing | None, str, str]]) -> list[BenchRow]:
    timed = {path: t for path, (t, _, _) in measured.items() if t is not None}
    best_p50 = min((t.p50 for t in timed.values()), default=math.nan)
    best_p99 = min((t.p99 for t in timed.values()), default=math.nan)
    best_rate = max((batch * 1e6 / t.mean for t in timed.values()), default=math.nan)
    order = [EAGER, COMPILE, COMPILE_MAX, PYTHON]
    rank = {path: (order.index(path) if path in order else len(order) + (path == ONNX) + 2 * (path == TRITON))
            for path in measured}
    rows = []
    for path, (t, skipped, note) in sorted(measured.items(), key=lambda item: rank[item[0]]):
        if t is None:
            rows.append(BenchRow(path, batch, skipped=skipped or "did not run"))
            continue
        rate = batch * 1e6 / t.mean
        rows.append(BenchRow(path, batch, t.p50, t.p99, rate, t.p50 / best_p50, t.p99 / best_p99, rate / best_rate,
                             note=note, round_p50s_us=t.round_p50s))
    return rows


def write_outputs(result: BenchmarkResult, output_dir: Path, title: str = "") -> tuple[Path, Path, Path]:
    """bench.json, bench.md and bench.png (p50 per path and batch, log scale) in
    ``output_dir``."""
    import json

    output_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = output_dir / "bench.json", output_dir / "bench.md", output_dir / "bench.png"
    json_path.write_text(json.dumps(finite_or_none(result.to_json()), indent=2) + "\n")
    md_path.write_text(result.markdown())
    plot_package(result, png_path, title)
    return json_path, md_path, png_path


def plot_package(result: BenchmarkResult, path: Path, title: str = "") -> Path:
    batches = sorted({r.batch for r in result.rows})
    paths = [p for p in result.paths() if any(r.path == p and r.p50_us is not None for r in result.rows)]
    figure, axes = latency_figure()
    width = 0.8 / max(1, len(paths))
    for i, name in enumerate(paths):
        for j, batch in enumerate(batches):
            row = result.row(name, batch)
            if row is None or row.p50_us is None:
                continue
            bar = axes.bar(j + (i - (len(paths) - 1) / 2) * width, row.p50_us, width,
                           color=f"C{i}", label=name if j == 0 or all(
                               (result.row(name, b) is None) for b in batches[:j]) else None)[0]
            label_bar(axes, bar, f"{row.p50_ratio:.2g}x")
    return save_latency_figure(
        figure, axes, path, [f"batch {b}" for b in batches],
        f"{title or 'package'}: p50 per path (ratio to the fastest above each bar)\n"
        f"{result.machine.get('cpu', '?')}, {result.threads} thread(s), torch {result.torch_version}",
    )



def package_call(package: "Package", inputs: Path | None, model_target: str | None,
                 model_args: Mapping[str, object] | None = None) -> tuple["CallInputs", torch.nn.Module | None]:
    """The call and eager model ``aoti-deploy bench --package`` measures: the tensors of
    ``inputs`` (a tensor file, in the package's input order) else the factory's
    example inputs else random inputs of the recorded shapes; shaped as the factory's
    example call when ``model_target`` (``package.module:factory``) is given.

    Raises:
        ModelError: the factory could not be imported or called.
        InputError: the tensor file does not fit the package or the factory's call.
    """
    from ..models.call import CallInputs
    from ..models.user import load_model
    from ..runtime.random_inputs import random_cpu_inputs
    from ..runtime.tensor_files import load_tensors

    model, example = (None, None)
    if model_target is not None:
        model, example = load_model(model_target, dict(model_args or {}))
    tensors = load_tensors(inputs) if inputs is not None else None
    if tensors is not None and len(tensors) != len(package.spec.inputs):
        raise InputError(f"--inputs {inputs}: {len(tensors)} tensor(s), the package takes {len(package.spec.inputs)}")
    if example is None:
        return CallInputs(tuple(tensors if tensors is not None else random_cpu_inputs(package.spec, 0))), model
    if tensors is None:
        return example, model
    if len(example.tensors()) != len(tensors):
        raise InputError(f"--inputs {inputs}: {len(tensors)} tensor(s), but --model {model_target}'s example call "
                         f"holds {len(example.tensors())}")
    return example.with_tensors(tensors), model
