"""The Python API: ``export`` a model to a verified AOTInductor package, ``load`` one
(a ``.pt2`` or a bundle, under the same trust rules as the runners), and call it
with the model's own arguments. Everything the CLIs do goes through these stages."""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from .bench.package_bench import BenchmarkResult, BenchRow
from .compiler.options import ONNX_MODES, TARGETS, ExportOptions
from .compiler.precision import PRECISIONS
from .package.spec_fields import QUANTIZE_MODES
from .compiler.result import ONNX_STAGES, STAGES, BuildResult
from .errors import InputError, PackageError, VerificationError
from .models.call import CallInputs
from .models.example import FactorySource, IdentitySource
from .package.spec import BITWISE, CLOSE, ULP, PackageSpec, Tolerance
from .serve.deployment import TritonDeployment, deploy_to_triton
from .serve.serving import Serving
from .serve.serving import serve_repository
from .serve.kubernetes import KubernetesSettings

__all__ = [
    "BenchRow", "BenchmarkResult", "BuildResult", "Dim", "ExportOptions", "FactorySource", "IdentitySource",
    "ONNX_MODES", "ONNX_STAGES", "OutputCheck", "Package", "PRECISIONS", "QUANTIZE_MODES", "Report", "STAGES", "TARGETS", "TritonDeployment",
    "Serving", "deploy_to_triton", "export", "load", "serve_repository",
]

# torch.export's own Dim, re-exported: dynamic_shapes take it as torch.export does.
Dim = torch.export.Dim

AGAINST = ("eager", "cpp")


@dataclass(frozen=True)
class OutputCheck:
    """One output against its reference: whether it passed the rule, and where and
    how far it differs (None where it does not). ``name`` labels it as the runners
    do: ``output 'scores'`` when the model returns its outputs by name, else
    ``output[0]``; an export's checks put the call's shapes first
    (``eager vs package [2, 8, 32] [2, 8] output 'scores'``)."""

    name: str
    passed: bool
    identical: bool
    num_differ: int
    max_abs: float | None
    max_ulp: float | None
    first_index: tuple[int, ...] | None
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: {'ok' if self.passed else 'FAILED'} ({self.detail})"


@dataclass(frozen=True)
class Report:
    """A verification: each output of each checked call against its reference,
    under ``tolerance``. ``passed`` when every one is within it."""

    against: str
    tolerance: Tolerance
    outputs: tuple[OutputCheck, ...]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.outputs)

    @property
    def bit_identical(self) -> bool:
        return all(check.identical for check in self.outputs)

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        lines = [f"{verdict} against {self.against} ({self.tolerance.describe()})"]
        return "\n".join(lines + [f"  {check}" for check in self.outputs])


def _tolerance(value: Tolerance | str | Mapping[str, float] | None) -> Tolerance | None:
    """``tolerance`` as the API takes it: a Tolerance, "bitwise", "close" (torch.testing's
    defaults), {"rtol": R, "atol": A} or {"max_ulp": N}."""
    if value is None or isinstance(value, Tolerance):
        return value
    if value == BITWISE:
        return Tolerance(BITWISE)
    if value == CLOSE:
        return Tolerance(CLOSE)
    if isinstance(value, Mapping):
        keys = set(value)
        if keys == {"rtol", "atol"}:
            return Tolerance(CLOSE, rtol=float(value["rtol"]), atol=float(value["atol"]))
        if keys == {"max_ulp"} and int(value["max_ulp"]) >= 0:
            ulp = int(value["max_ulp"])
            return Tolerance(ULP, max_ulp=ulp) if ulp else Tolerance(BITWISE)
    raise InputError(
        f"tolerance {value!r} is not a rule; give 'bitwise', 'close' (torch.testing's defaults), "
        "{'rtol': R, 'atol': A}, {'max_ulp': N} or an aoti_deploy Tolerance"
    )


def _module_names(modules: Iterable[str | ModuleType]) -> list[str]:
    return [module.__name__ if isinstance(module, ModuleType) else str(module) for module in modules]


def export(
    model: nn.Module | torch.export.ExportedProgram | IdentitySource | FactorySource,
    args: Any = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    package_path: str | os.PathLike[str] | None = None,
    options: ExportOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
    **option_values: Any,
) -> "Package":
    """Export ``model`` with torch.export, compile it with AOTInductor into a package
    and verify the package against eager, as ``aoti-deploy export`` does.

    Args:
        model: an ``nn.Module``, or a ``torch.export.ExportedProgram`` (compiled as
            it is; its ``module()`` is the eager reference); or a source that makes
            the model and its example call itself: ``IdentitySource`` (the built-in
            IdentityModel) or ``FactorySource`` (``package.module:factory``), with
            no ``args``.
        args: the example positional arguments (a tuple; one tensor for a
            one-argument model), nested as the model takes them. Python ints,
            floats, bools and strings are baked in by torch.export; the package
            refuses another value for them.
        kwargs: the example keyword arguments.
        dynamic_shapes: torch.export's own format: ``torch.export.Dim`` objects in a
            dict by argument name, or a tuple in argument order. Every other dim is
            static.
        package_path: where to write the ``.pt2`` (or ``.onnx``); default a new
            temporary folder.
        options: the ExportOptions (default: ExportOptions()'s documented defaults).
        on_stage: called with each stage's name as it starts (progress). The stages
            also go to the ``aoti_deploy`` logger at INFO, silent unless logging is
            configured (``logging.basicConfig(level=logging.INFO)``).
        **option_values: any field of ExportOptions by name, over ``options``:
            ``op_libraries``, ``fake_modules``, ``cpu_target``, ``check``,
            ``tolerance`` (also "bitwise", "close", {"rtol": R, "atol": A} or
            {"max_ulp": N}), ``input_values``, ``allow_python_ops``,
            ``inductor_configs``, ``device``, ``force``, ``target``, ``onnx_mode``,
            ``seed``, ``optimize``, ``tune_budget``, ``threads`` (the intra-op
            thread count the package will run at), ``references``; ``quantize``
            ("int8" or "int8-dynamic") with ``calibration`` (a list of calls), and
            ``precision`` ("bf16"): see docs/int8.md.

    Returns:
        The verified Package; ``report`` holds the comparison against eager, and
        ``result`` the whole record of the export (stages' times, graph, ops).

    Raises:
        VerificationError: an output differs from eager beyond the tolerance (the
            report is on the exception's ``report``, the record on its
            ``result``); nothing is written.
        ExportError, CompileError, OpLibraryError, InputError, ModelError: from the
            stages.
    """
    from .compiler.pipeline import export_and_compile
    from .models.example import given_example

    chosen = _options(options, option_values)
    program = model if isinstance(model, torch.export.ExportedProgram) else None
    call = None
    if isinstance(model, (IdentitySource, FactorySource)):
        if args is not None or kwargs is not None or dynamic_shapes is not None:
            raise InputError(f"a {type(model).__name__} makes its own example call: pass no args, kwargs or "
                             "dynamic_shapes with it")
        source: Any = model
        eager = None
        name = "IdentityModel" if isinstance(model, IdentitySource) else model.target.rpartition(":")[2]
    else:
        if program is not None:
            eager = program.module()
        elif isinstance(model, nn.Module):
            eager = model
        else:
            raise InputError(f"model must be an nn.Module or a torch.export.ExportedProgram, got a "
                             f"{type(model).__name__}")
        if args is None:
            raise InputError("export needs the example call: pass args (a tuple of the model's positional "
                             "arguments, or one tensor)")
        call = CallInputs.of(args, kwargs)
        source = given_example(eager, call, chosen.device)
        name = type(eager).__name__
    if package_path is None:
        suffix = ".onnx" if chosen.target == "onnx" else ".pt2"
        package_path = Path(tempfile.mkdtemp(prefix="aoti_deploy_")) / f"{name}{suffix}"
    result = export_and_compile(source, chosen, Path(package_path), _logged_stages(on_stage),
                                dynamic_shapes=dynamic_shapes, program=program)
    for setting, reason in result.dropped_settings:
        _log.warning("export: compiled without %s for this model, because with it %s", setting.name, reason)
    if result.speed_cost:
        _log.warning("export: %s", result.speed_cost)
    report = _build_report(result) if chosen.check else None
    if not result.written:
        error = VerificationError(
            f"the package differs from eager beyond the tolerance ({result.tolerance.describe()}), so it was not "
            f"written:\n{report}\n"
            + (f"Likely cause: {result.failure_hint}\n" if result.failure_hint else "")
            + "Raise the tolerance if this is expected (tolerance={'rtol': R, 'atol': A}), or find the op that differs"
        )
        error.report = report  # type: ignore[attr-defined]
        error.result = result  # type: ignore[attr-defined]
        raise error
    reference = result.reference_model if result.reference_model is not None else eager
    package = Package(result.package_path, result.spec, report=report, model=reference, example=call)
    package._libraries = list(result.op_libraries)
    package.result = result
    return package


def _options(options: ExportOptions | None, values: Mapping[str, Any]) -> ExportOptions:
    """``options`` with ``values`` (ExportOptions fields by name) over it."""
    fields = {f.name for f in dataclasses.fields(ExportOptions)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise InputError(f"export got unknown option(s) {', '.join(unknown)}; the options are ExportOptions' "
                         f"fields: {', '.join(sorted(fields))}")
    values = dict(values)
    if "tolerance" in values:
        values["tolerance"] = _tolerance(values["tolerance"])
    for name in ("op_libraries", "references"):
        if values.get(name) is not None:
            values[name] = [Path(p) for p in values[name]] if name == "op_libraries" else Path(values[name])
    if "fake_modules" in values:
        values["fake_modules"] = _module_names(values["fake_modules"])
    for name in ("input_values", "inductor_configs"):
        if name in values:
            values[name] = dict(values[name] or {})
    return dataclasses.replace(options or ExportOptions(), **values)


_log = logging.getLogger("aoti_deploy")


def _logged_stages(on_stage: Callable[[str], None] | None) -> Callable[[str], None]:
    """Each stage to the ``aoti_deploy`` logger (INFO, with the time the last one
    took; silent until the application configures logging, e.g.
    ``logging.basicConfig(level=logging.INFO)``), then to ``on_stage``."""
    started = [time.perf_counter(), ""]

    def stage(name: str) -> None:
        now = time.perf_counter()
        if started[1]:
            _log.info("export: %s took %.1f s", started[1], now - started[0])
        _log.info("export: %s", name)
        started[:] = [now, name]
        if on_stage is not None:
            on_stage(name)

    return stage


def _output_check(name: str, comparison: Any) -> OutputCheck:
    bits = comparison.bits
    return OutputCheck(
        name=name, passed=comparison.passed, identical=bits.identical, num_differ=bits.num_differ,
        max_abs=bits.max_abs_diff, max_ulp=bits.max_ulp, first_index=bits.first_index, detail=str(comparison),
    )


def _build_report(result: Any) -> Report:
    return Report("eager", result.tolerance, tuple(_output_check(label, c) for label, c in result.checks))


def load(
    path: str | os.PathLike[str],
    *,
    op_libraries: Sequence[str | os.PathLike[str]] | None = None,
    fake_modules: Iterable[str | ModuleType] = (),
    trusted_key: str | os.PathLike[str] | None = None,
    require_signature: bool = False,
) -> "Package":
    """Load a ``.pt2`` package or a bundle folder into this process, under the same
    trust rules as the runners: with a trusted key (argument, else
    ``$AOTI_DEPLOY_TRUSTED_KEY``), only a signed bundle loads, and only after its
    signature and every file's digest are verified; nothing native loads before.

    Args:
        path: the package or bundle.
        op_libraries: op libraries to load (not with a bundle, which carries its
            own). Default: the project's library if the package needs it.
        fake_modules: modules to import after the libraries (fakes, Python ops).
        trusted_key: a PEM EC public key that signed bundles must verify under.
        require_signature: refuse unsigned input even without a key.

    Returns:
        The Package, loaded and callable.

    Raises:
        PackageError: the package or bundle is refused (unsigned, bad signature,
            damaged, wrong host); OpLibraryError: a library failed to load.
    """
    package = Package(Path(path), None)
    package._open(op_libraries, _module_names(fake_modules), trusted_key, require_signature)
    return package


class Package:
    """A compiled, verified package: call it like the model, inspect its ``spec``,
    verify it, bundle it, serve it. Loaded into this process on first call."""

    def __init__(
        self,
        path: Path,
        spec: PackageSpec | None,
        *,
        report: Report | None = None,
        model: nn.Module | None = None,
        example: Any = None,
    ) -> None:
        self.path = Path(path)
        self._spec = spec
        self.report = report  # the comparison with eager made at export
        self._model = model
        self._example = example
        self._loaded: Any = None
        self._session: Any = None
        self._trusted_key: str | os.PathLike[str] | None = None
        self._require_signature = False
        self._libraries: list[Path] = []
        # The export's whole record (stages, graph, ops, checks) when this process made it.
        self.result: BuildResult | None = None

    def __repr__(self) -> str:
        return f"Package({str(self.path)!r})"

    @property
    def spec(self) -> PackageSpec:
        """What the package records: inputs and outputs (names, dtypes, dynamic
        ranges, value ranges), the op libraries, the CPU target, the tolerance."""
        if self._spec is None:
            from .package.archive import read_package_spec

            self._spec = read_package_spec(self.path)
        return self._spec

    def _open(self, op_libraries: Sequence[str | os.PathLike[str]] | None, fake_modules: list[str],
              trusted_key: str | os.PathLike[str] | None = None, require_signature: bool = False) -> None:
        from .runtime.session import open_session
        from .runtime.trust import trust_policy

        session = open_session(self.path, op_libraries=list(op_libraries or []), fake_modules=fake_modules,
                               policy=trust_policy(trusted_key, require_signature))
        if session.onnx:
            session.close()
            raise PackageError(f"{self.path} is an ONNX file; aoti_deploy.load takes a .pt2 package or a bundle")
        self._session, self._loaded, self._spec = session, session.model, session.spec
        self._trusted_key, self._require_signature = trusted_key, require_signature
        self._libraries = session.libraries or self._libraries

    def _runtime(self) -> Any:
        if self._loaded is None:
            self._open(self._libraries or None, [])
        return self._loaded

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the package in this process with the model's own arguments (args and
        kwargs, nested as at export). Returns the model's own output structure: a
        dict stays a dict, a tuple a tuple, a ModelOutput or other registered
        dataclass the same type where its module imports here, else a dict by
        field name. A Python int, float or bool the model returns (``x.item()``,
        ``x.shape[0]``, a constant) comes back as that Python value.

        Raises:
            InputError: arguments the package does not take (structure, dtype,
                shape, an index out of its recorded range), with what was expected.
        """
        return self._runtime()(*args, **kwargs)

    def run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The package's tensor inputs in order (as a tensor file holds them) in, its
        flat outputs out: what the C++ runner and Triton see."""
        from .runtime.aoti import to_package_device

        return self._runtime().run(to_package_device(list(tensors), self.spec))

    def flat_inputs(self, args: Any, kwargs: Mapping[str, Any] | None = None) -> list[torch.Tensor]:
        """The tensors a call passes to the package, in the package's order (what a
        tensor file for the C++ runner holds)."""
        from .runtime.aoti import call_tensors

        call = CallInputs.of(args, kwargs)
        in_spec, _ = self._runtime()._compiled.specs()
        return call_tensors(call.args, call.kwargs, in_spec, self.spec)

    def verify(
        self,
        args: Any,
        kwargs: Mapping[str, Any] | None = None,
        *,
        against: str = "eager",
        model: nn.Module | None = None,
        tolerance: Tolerance | str | Mapping[str, float] | None = None,
    ) -> Report:
        """Compare this package's outputs for a call with a reference.

        Args:
            args: the call's positional arguments, as the model takes them.
            kwargs: the call's keyword arguments.
            against: "eager" (the model, under the package's recorded tolerance
                unless ``tolerance`` is given) or "cpp" (the C++ runner as a
                process, on the same tensors: bitwise, as runtimes of one package
                must agree).
            model: the eager model; default the one this package was exported from.
            tolerance: the rule instead of the default one (as ``export`` takes it).

        Returns:
            The Report (it does not raise on a difference: check ``passed``).
        """
        from .models.user import flatten_outputs
        from .verify.tolerance import compare_outputs, output_labels

        if against not in AGAINST:
            raise InputError(f"against={against!r}: expected one of {', '.join(AGAINST)}")
        call = CallInputs.of(args, kwargs)
        tensors = self.flat_inputs(call.args, call.kwargs)
        outputs = self.run(tensors)
        if against == "eager":
            model = model if model is not None else self._model
            if model is None:
                raise InputError("verify(against='eager') needs the eager model: pass model=...")
            rule = _tolerance(tolerance) or self.spec.eager_check or Tolerance(CLOSE)
            if isinstance(model, nn.Module) and not isinstance(model, torch.fx.GraphModule):
                model = model.eval()  # an ExportedProgram's module() refuses eval()
            with torch.no_grad():
                references = flatten_outputs(call.call(model))
        else:
            rule = _tolerance(tolerance) or Tolerance(BITWISE)
            references = self._run_cpp(tensors)
        labels = output_labels(self.spec, len(outputs))  # as the runners name them
        compared = compare_outputs(outputs, references, rule, lambda k: labels[k], reference_name=f"{against} reference")
        checks = [_output_check(name, comparison) for name, comparison in compared]
        return Report(against, rule, tuple(checks))

    def _cpp_runner(self, runner: str | os.PathLike[str] | None = None) -> Any:
        """aoti_runner on this package, under the trust options it was loaded with
        (a bundle brings its own op libraries)."""
        from .package.bundle import is_bundle
        from .runtime.cpp_runner import CppRunner

        return CppRunner(self.path, [] if is_bundle(self.path) else list(self._libraries), self._trusted_key,
                         self._require_signature, runner)

    def _run_cpp(self, tensors: list[torch.Tensor], runner: str | os.PathLike[str] | None = None) -> list[torch.Tensor]:
        """The C++ runner's outputs for these tensors (a process, no Python in it)."""
        return self._cpp_runner(runner).outputs(tensors)

    def bundle(self, directory: str | os.PathLike[str], *, sign_key: str | os.PathLike[str] | None = None,
               op_libraries: Sequence[str | os.PathLike[str]] = ()) -> Path:
        """Write a deploy bundle (the package and the op libraries it records),
        signed with OpenSSF Model Signing if ``sign_key`` (a PEM EC private key) is
        given. Default libraries: those the export loaded that the package records
        (one loaded but not called after compiling stays out). Returns the bundle
        folder."""
        from .package.bundle import recorded_libraries
        from .package.bundle_writer import write_bundle

        recorded = recorded_libraries(self.spec)
        libraries = list(op_libraries) or [path for path in self._libraries if Path(path).name in recorded]
        return write_bundle(self.path, libraries, directory, sign_key)

    def to_triton(self, repository: str | os.PathLike[str], name: str | None = None, *,
                  kubernetes: str | os.PathLike[str] | None = None,
                  kubernetes_settings: KubernetesSettings | None = None, **config: Any) -> Path:
        """Write the package into a Triton model repository as ``name`` (default: the
        package's file name); ``config`` takes write_repository's options (version,
        instances, dynamic_batching, max_queue_delay_us, sign_key, trusted_key,
        op_libraries, intra_op_threads). With ``kubernetes``, also write Kubernetes
        manifests for the repository into that folder (``kubernetes_settings``: image,
        replicas, CPU limit, claim, KServe; see docs/kubernetes.md); a bad setting is
        refused before anything is written. Returns the model's folder."""
        config.setdefault("op_libraries", self._libraries)
        deployment = deploy_to_triton(self.path, repository, name, kubernetes=kubernetes,
                                      kubernetes_settings=kubernetes_settings, **config)
        return deployment.model.config_path.parent

    def benchmark(
        self,
        args: Any,
        kwargs: Mapping[str, Any] | None = None,
        *,
        model: nn.Module | None = None,
        iterations: int = 100,
        warmup: int = 10,
        rounds: int = 1,
        cpp: bool = True,
        threads: int | None = None,
        batches: Sequence[int] = (1, 8),
        compile: bool = True,
        max_autotune: bool = True,
        compile_timeout: float = 600.0,
        onnx: bool | None = None,
        triton: bool = False,
        on_step: Callable[[str], None] | None = None,
    ) -> BenchmarkResult:
        """Time this package against the other ways to run its model, on the same
        inputs in one run, at each of ``batches`` (the call's tensors resized along
        dim 0; a package static in batch measures only the batches it takes, and the
        result's ``notes`` say so): eager, torch.compile (default and max-autotune,
        each first call bounded by ``compile_timeout`` seconds), this package in the
        Python runtime and in the C++ runner (timed inside its process, at 1 thread
        and at ``threads``), and ONNX Runtime on an ONNX export of the model (the
        toolkit's own where it takes the model, else torch.onnx.export(dynamo=True)).

        Args:
            args: the call's positional arguments, as the model takes them.
            kwargs: its keyword arguments.
            model: the eager model; default the one this package was exported from.
                Without one, only the package's own paths run.
            batches: the batch sizes to measure.
            iterations: timed runs per path and batch (in each round).
            warmup: untimed runs before them.
            rounds: time every path this many times, the paths in turn, and report
                the median of the rounds' figures (each row keeps the rounds' p50s):
                on a host whose speed drifts, the drift then reaches every path alike.
            threads: intra-op threads for every path (default torch's current).
            compile: include torch.compile's default row.
            max_autotune: include torch.compile's max-autotune row.
            compile_timeout: seconds a torch.compile first call may take.
            cpp: include the C++ runner's rows.
            onnx: include ONNX Runtime (default: when the ONNX extra is installed).
            triton: a Triton row (this benchmark starts no server: it says so).
            on_step: called with each path's name as it starts (progress).

        Returns:
            BenchmarkResult: a row per path and batch with p50, p99, throughput and
            each as a ratio to the fastest; a path that could not run has a row
            whose ``skipped`` says why. ``table()``, ``markdown()``, ``to_json()``.
        """
        from .bench.package_bench import benchmark_package

        return benchmark_package(
            self, CallInputs.of(args, kwargs), model if model is not None else self._model,
            batches=tuple(batches), iterations=iterations, warmup=warmup, rounds=rounds, threads=threads,
            compile=compile,
            max_autotune=max_autotune, compile_timeout=compile_timeout, cpp=cpp, onnx=onnx, triton=triton,
            on_step=on_step,
        )

    def _bench_cpp(self, tensors: list[torch.Tensor], iterations: int, warmup: int,
                   intra_op_threads: int | None = None) -> dict[str, Any]:
        """``aoti_runner --bench`` on these tensors: its JSON (p50_us, p99_us, mean_us,
        intra_op_threads, ...). ``intra_op_threads`` None lets the runner choose."""
        threads = [] if intra_op_threads is None else ["--intra-op-threads", str(intra_op_threads)]
        return self._cpp_runner().bench(tensors, iterations, warmup, *threads)

    def close(self) -> None:
        """Unload the package (and remove a verified bundle's private copy)."""
        if self._session is not None:
            self._session.close()
        self._session = self._loaded = None

    def __enter__(self) -> "Package":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
