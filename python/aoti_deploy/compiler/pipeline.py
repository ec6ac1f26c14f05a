"""An export, stage by stage: load op libraries, build the model and its example call
(models/example.py), then either reuse the package at the output (the compile cache)
or export and compile it (package_build.py), and verify it against eager
(eager_check.py) before it replaces the output; or, for the ONNX target, take its own
route (onnx_target.py). Stages report progress through an optional callback and
never print."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Union

import torch

from ..errors import CompileError, OpLibraryError
from ..models.example import FactorySource, IdentitySource, ModelExample
from ..models.identity import IDENTITY_CLASS, IdentityModel
from ..models.user import flatten_outputs, import_modules
from ..ops.loader import LIBRARY_NAME, load_op_libraries, load_op_library
from ..package.spec import OpRef, PackageSpec
from ..runtime.aoti import load_package
from ..runtime.tensor_files import save_references
from ..verify.tolerance import BITWISE, CLOSE, Tolerance
from .cache import build_cache_key, cached_spec
from .eager_check import recorded_checks
from .export import GraphCalls
from .onnx_target import export_onnx_file
from .options import TUNE, ExportOptions
from .package_build import ExportedGraph, compile_staged, export_graph, int8_host_hint
from .package_check import check_staged, put_in_place, save_staged_references
from .result import BuildResult
from .speed import (
    RewriteFailed, applicable, compile_configs, default_settings, dynamic_shape_cost, recorded_settings,
    records_rewrite, rewritten, settings_summary,
)
from .stages import ExportRun
from .tuner import tune
from .staging import staging_path

# What to export: a model with its example call already made (the Python API), or a
# source that makes them once the op libraries are loaded.
ModelSource = Union[ModelExample, IdentitySource, FactorySource]

_CACHED_GRAPH = "(the package at the output was built from the same inputs: export and compile skipped)"


def export_and_compile(
    source: ModelSource,
    options: ExportOptions,
    output: Path,
    on_stage: Callable[[str], None] | None = None,
    *,
    dynamic_shapes: Any = None,
    program: torch.export.ExportedProgram | None = None,
) -> BuildResult:
    """Run every stage of an export.

    Args:
        source: the model and its example call, or an IdentitySource or
            FactorySource that makes them.
        options: how to export, compile and check it.
        output: where to write the package (or ONNX file).
        on_stage: called with each stage's name (result.STAGES) as it starts.
        dynamic_shapes: with a ModelExample, torch.export's own ``dynamic_shapes``.
        program: with a ModelExample, a program already exported from its model
            (its ``module()``): compiled as it is, not exported again.

    Returns:
        The BuildResult. ``passed`` says whether the package's outputs are within
        the tolerance of eager's at every checked shape; the caller decides what a
        difference means.

    Raises:
        OpLibraryError, ModelError, ExportError, CompileError, PackageError,
        InputError, VerificationError: from the stages.
    """
    options.validate(output)
    # The compile, its checks and the cache key at the package's thread count: with
    # freezing, oneDNN lays convolution weights out for it.
    threads, previous = options.intra_op_threads(), torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        result = _export_and_compile(source, options, output, on_stage, dynamic_shapes, program)
        if not result.written:
            result.failure_hint = int8_host_hint(options)
        return result
    finally:
        if threads:
            torch.set_num_threads(previous)


def _export_and_compile(
    source: ModelSource, options: ExportOptions, output: Path, on_stage: Callable[[str], None] | None,
    dynamic_shapes: Any, program: torch.export.ExportedProgram | None,
) -> BuildResult:
    if not isinstance(source, ModelExample):
        source.check()
    timings: dict[str, float] = {}

    @contextmanager
    def stage(name: str, label: str | None = None) -> Iterator[None]:
        # ``label``: what on_stage shows when a stage runs again (a compile without a
        # dropped setting); its time adds to the stage's.
        if on_stage:
            on_stage(label or name)
        start = time.perf_counter()
        yield
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - start

    with stage("load op libraries"):
        libraries = _load_libraries(source, options)

    with stage("build model"):
        example = source if isinstance(source, ModelExample) else source.build(options.device)
        # Identity is the IdentityModel's contract, so it is held to the same bits.
        tolerance = options.tolerance or Tolerance(BITWISE if getattr(example.model, "is_identity", False) else CLOSE)
        if options.target == "onnx":
            key, cached = "", None  # ONNX export takes seconds: no compile cache
        else:
            key = build_cache_key(example, options, libraries, dynamic_shapes)
            cached = None if options.force else cached_spec(output, key)

    run = ExportRun(example, options, output, libraries, tolerance, stage, timings)
    if options.target == "onnx":
        return export_onnx_file(run)

    result = BuildResult(
        package_path=output, spec=None, calls=GraphCalls([], []), graph=_CACHED_GRAPH,  # type: ignore[arg-type]
        example_inputs=example.inputs, checks=[], op_libraries=libraries, tolerance=tolerance,
        model_name=example.name, reference_dir=options.references, timings=timings,
    )
    if cached is not None and (options.quantize or options.precision != "fp32"):
        # An int8 or bf16 package is checked against its low-precision model, which only
        # the export makes, under a rule from its drift: export and compile again.
        cached = None
    if cached is not None and cached.eager_check != tolerance and records_rewrite(cached, options):
        # Its graph rewrite was applied under the old rule; whether it applies, and the
        # fallback without it, belong to the compile: export and compile again.
        cached = None
    if cached is not None and cached.eager_check == tolerance:
        return _reuse(cached, run, result)
    if cached is not None:
        # The same compiled code, held to another rule: verify it again, on a copy.
        for name in ("export", "compile"):
            with stage(name):
                pass
        result.calls = _recorded_calls(cached)
        result.reverified = True
        package_path = staging_path(output)
        try:
            shutil.copyfile(output, package_path)
        except BaseException:
            package_path.unlink(missing_ok=True)
            raise
    else:
        exported = export_graph(run, dynamic_shapes, program)
        result.tolerance = run.tolerance  # an int8 or bf16 export's rule comes from its drift
        if options.quantize or options.precision != "fp32":
            result.reference_model = run.example.model  # the low-precision model, for Package.verify
        result.calls, result.graph = exported.calls, exported.graph_text
        if options.optimize == TUNE:
            tune(run, exported, key, result)
        else:
            _compile_and_verify(run, exported, key, result)
        if result.written and result.spec is not None and options.device == "cpu" and not options.quantize \
                and options.precision == "fp32":  # measured on fp32 CPU packages only
            result.speed_cost = dynamic_shape_cost(exported.program, result.spec.inductor_configs)
        return result

    with stage("verify"):
        try:
            _verify_and_put_in_place(run, package_path, key, result)
        finally:
            package_path.unlink(missing_ok=True)
    return result


def _compile_and_verify(run: ExportRun, exported: ExportedGraph, key: str, result: BuildResult) -> None:
    """Compile with the speed settings (speed.py) and verify; when the compile fails or
    the package fails its check with settings applied, drop the last one and try
    again, so what is written is always verified. A failure with none applied is
    the model's own, raised or reported as ever."""
    settings = applicable(default_settings(run.options), exported.program, run.tolerance)
    while True:
        summary = settings_summary(settings, result.dropped_settings) if (settings or result.dropped_settings) else ""
        label = "compile" if not result.dropped_settings else (
            f"compile again without {result.dropped_settings[-1][0].name}")
        try:
            staged = replace(exported, program=rewritten(settings, exported.program))
        except RewriteFailed as failed:
            settings.remove(failed.setting)
            result.dropped_settings.append((failed.setting, str(failed)))
            continue
        try:
            package_path = compile_staged(run, staged, compile_configs(settings, run.options), summary, label)
        except CompileError as error:
            if not settings or run.options.quantize:  # an int8 compile needs freezing
                raise
            result.dropped_settings.append((settings.pop(), f"the compile failed: {_first_line(error)}"))
            continue
        with run.stage("verify"):
            try:
                _verify_and_put_in_place(run, package_path, key, result)
            finally:
                package_path.unlink(missing_ok=True)
        if result.written or not settings or run.options.quantize:
            result.speed_settings = [setting.name for setting in settings]
            return
        worst = next((f"{check}: {comparison}" for check, comparison in result.checks if not comparison.passed),
                     "a check failed")
        result.dropped_settings.append((settings.pop(), f"the package failed its check against eager: {worst}"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def _recorded_calls(spec: PackageSpec) -> GraphCalls:
    """What a cached package's graph calls, as its spec records it."""
    return GraphCalls(sorted({op.name for op in spec.required_ops}), spec.required_classes)


def _load_libraries(source: ModelSource, options: ExportOptions) -> list[Path]:
    """The op libraries this export loads: the options', else, for the IdentityModel,
    the project's own; then the fake modules."""
    identity = isinstance(source, IdentitySource)
    if options.op_libraries:
        libraries = load_op_libraries(options.op_libraries)
        if identity and source.model is None:
            _require_identity_library(source.model_class, libraries)
    elif identity:
        libraries = [load_op_library()]
    else:
        libraries = []
    import_modules(options.fake_modules)
    return libraries


def _reuse(cached: PackageSpec, run: ExportRun, result: BuildResult) -> BuildResult:
    """A cache hit under the same rule: nothing to export, compile or verify."""
    for name in ("export", "compile", "verify"):
        with run.stage(name):
            pass
    example = run.example
    if run.options.references is not None:
        with torch.no_grad():
            eager = flatten_outputs(example.call.call(example.model))
        outputs = load_package(run.output, cached).run(list(example.inputs))
        save_references(run.options.references, example.inputs, outputs, eager, cached.named_outputs(len(outputs)))
    result.spec = cached
    result.calls = _recorded_calls(cached)
    result.checks = recorded_checks(cached, result.tolerance)
    result.speed_settings = recorded_settings(cached, run.options)
    result.cached = True
    return result


def _verify_and_put_in_place(run: ExportRun, package_path: Path, key: str, result: BuildResult) -> None:
    """Check the staged package against eager; one that passed records its checks
    (and the cache key) and replaces the output."""
    found = check_staged(run, package_path, result)
    save_staged_references(run, found)
    if found.passed:
        put_in_place(run, package_path, key, result, found)


def _require_identity_library(model_class: type[IdentityModel], libraries: list[Path]) -> None:
    """The libraries given are all that is loaded: when none registers what the
    IdentityModel calls, say so instead of loading the default one behind the
    user's back."""
    from ..runtime.preflight import this_host

    host = this_host()
    needs = [f"class {IDENTITY_CLASS}"] if not host.has_class(IDENTITY_CLASS) else []
    needs += [f"op {op}" for op in model_class.custom_ops if not host.has_op(OpRef(op))]
    if needs:
        given = ", ".join(path.name for path in libraries)
        raise OpLibraryError(
            f"the {model_class.__name__} needs {' and '.join(needs)}, defined in {LIBRARY_NAME}, which the "
            f"libraries given with --op-lib ({given}) do not register. Add --op-lib with the path of "
            f"{LIBRARY_NAME} (./scripts/setup.sh builds it into build/), or leave out --op-lib to load it "
            "from the build folder."
        )

