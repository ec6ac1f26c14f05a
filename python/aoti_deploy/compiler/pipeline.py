"""The export_compile job as one function: load op libraries, build the model (the
IdentityModel, or a user's own from ``package.module:factory``), export (static or
with dynamic dims), refuse ops that C++ cannot run, compile, then verify the package
against eager: bitwise for identity models, else under torch.testing's tolerance
(or the one asked for), which the package records. Stages report progress through an optional callback and
never print."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .cache import cache_key
from .compile import compile_package
from .cpu_target import check_cpu_target
from ..errors import ExportError, InputError, OpLibraryError, PackageError, VerificationError
from ..package.host import NATIVE, target_cpu_flags
from .export import (
    GraphCalls,
    export_model,
    graph_calls,
    input_specs,
    output_specs,
    package_extern_ops,
    python_only_ops,
    shared_dims,
)
from ..models.identity import IDENTITY_CLASS, MODEL_VARIANTS, IdentityModel, IdentityOutModel
from ..ops.loader import LIBRARY_NAME, libraries_for, load_op_libraries, load_op_library, namespaces_by_library
from .optimize import optimize_program
from .index_guards import compile_with_checks_outside_parallel, guard_indices
from .value_ranges import record_value_ranges
from ..package.archive import read_package_spec, rewrite_package_metadata
from ..package.dtypes import DEFAULT_RANDOM_VALUES, DTYPES, INPUT_DTYPES, INTEGER_DTYPES, dtype_name
from ..package.spec import INT64_MAX, OpRef, PackageSpec
from ..runtime.aoti import load_package
from ..runtime.tensor_files import save_tensors
from ..models.user import DynamicDim, flatten_outputs, import_modules, load_model
from ..models.call import CallInputs
from .structure import check_tensor_outputs, constant_inputs
from ..verify.bits import BitReport
from ..verify.tolerance import BITWISE, CLOSE, FAILED, Comparison, Tolerance, compare, list_verdict

STAGES = ("load op libraries", "build model", "export", "compile", "verify")
# The stages of the ONNX target (export_compile onnx).
ONNX_STAGES = ("load op libraries", "build model", "export", "convert to ONNX", "verify")
FORMATS = ("pt2", "onnx")
# Files --save-reference writes: the example inputs, the package's outputs for them
# (for the runtime parity check of any other runtime, bitwise) and eager's (for the
# compiled-vs-eager check, under the recorded tolerance).
REFERENCE_INPUTS = "inputs.pt"
REFERENCE_OUTPUTS = "expected.pt"
REFERENCE_EAGER = "eager.pt"

# Input dims of the IdentityModel that may be dynamic, and their position in NCHW.
DYNAMIC_DIMS = {"batch": 0, "height": 2, "width": 3}
DEFAULT_RANGES = {"batch": (1, 64), "height": (1, 1024), "width": (1, 1024)}


@dataclass
class BuildConfig:
    channels: int = 3
    batch: int = 1
    height: int = 224
    width: int = 224
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    output: Path = Path("artifacts/model.pt2")
    # Op libraries to load before export; without any, the project's library is
    # looked up in its default places.
    op_libs: list[Path] = field(default_factory=list)
    # Modules imported after the libraries load, e.g. to register their fakes.
    fake_modules: list[str] = field(default_factory=list)
    # Names from DYNAMIC_DIMS, and their inclusive (min, max) ranges.
    dynamic: tuple[str, ...] = ()
    ranges: dict[str, tuple[int, int]] = field(default_factory=lambda: dict(DEFAULT_RANGES))
    # "functional" (layer3 is identity_conv_op) or "out" (layer3 is identity_conv_op_out).
    variant: str = "functional"
    # A user's model instead of the IdentityModel: "package.module:factory", called
    # with model_args. Its example inputs come from the factory or input_shapes.
    model: str | None = None
    model_args: dict[str, object] = field(default_factory=dict)
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    dynamic_dims: list[DynamicDim] = field(default_factory=list)
    # Value ranges of integer inputs (input index -> inclusive (min, max)) where the
    # export's own analysis cannot see them (value_ranges.py); intersected with it.
    input_values: dict[int, tuple[int, int]] = field(default_factory=dict)
    # Write the example inputs, the package's and eager's outputs here (inputs.pt,
    # expected.pt, eager.pt).
    save_reference: Path | None = None
    # Write a package for the Python runtime only when the graph calls Python ops.
    allow_python_ops: bool = False
    # The rule the package's outputs are held to against eager's, recorded in the
    # package. None: bitwise for identity models, else torch.testing's defaults.
    tolerance: Tolerance | None = None
    # Export-time graph optimizations (optimize.py); each keeps eager's bits.
    optimize: bool = True
    # Rebuild even if the package at `output` was built from the same inputs.
    force: bool = False
    # "pt2" (AOTInductor package) or "onnx" (an ONNX file for onnxruntime).
    format: str = "pt2"
    # ONNX only: "portable" (standard ops) or "custom-domain" (custom ops as nodes).
    onnx_mode: str = "portable"
    # .pt2 only: the CPU the compiled code may assume: "native" (-march=native, this
    # host's every feature) or a portable x86-64 psABI level (package/host.py).
    cpu_target: str = NATIVE
    # Inductor settings to compile with (freezing, max_autotune, ...), recorded in the
    # package and verified like everything else.
    inductor_configs: dict[str, Any] = field(default_factory=dict)
    # Compare the package with eager before writing it (the Python API's check=False
    # skips it: the package then records no checks).
    verify: bool = True

    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    def export_shape(self) -> tuple[int, ...]:
        """The shape to trace with. torch.export specialises a dim whose example
        size is 1, so a dynamic dim of size 1 is traced at 2 (the range keeps 1)."""
        shape = list(self.shape())
        for name in self.dynamic:
            if shape[DYNAMIC_DIMS[name]] == 1:
                shape[DYNAMIC_DIMS[name]] = 2
        return tuple(shape)

    def _check_format(self) -> None:
        """The ONNX target's own limits, and an output name that matches the format
        (the runners tell .onnx files from .pt2 packages by the suffix)."""
        from .onnx_export import ONNX_MODES
        from ..runtime.onnx_extra import require_onnx

        is_onnx_name = self.output.suffix.lower() == ".onnx"
        if self.format == "pt2":
            check_cpu_target(self.cpu_target)
            if is_onnx_name:
                raise InputError(
                    f"--output {self.output} names an ONNX file, but the target is a .pt2 package; run "
                    "export_compile onnx for an ONNX file, or name the package *.pt2"
                )
            return
        if self.onnx_mode not in ONNX_MODES:
            raise InputError(f"unknown ONNX mode {self.onnx_mode!r}; expected one of {', '.join(ONNX_MODES)}")
        if not is_onnx_name:
            raise InputError(
                f"--output {self.output}: an ONNX file must end in .onnx (the runners tell it from a .pt2 "
                "package by the suffix)"
            )
        if self.device != "cpu":
            raise InputError(
                "the ONNX target exports on the CPU (--device cpu): the file is device-independent, and "
                "onnxruntime picks its execution provider when it loads it"
            )
        if self.allow_python_ops:
            raise InputError("--allow-python-ops applies to .pt2 packages; the ONNX target translates every op")
        if self.cpu_target != NATIVE:
            raise InputError(
                "--cpu-target applies to .pt2 packages; an ONNX file holds no compiled code (onnxruntime picks "
                "its kernels for the host it runs on)"
            )
        require_onnx()

    def check(self) -> None:
        """Raise InputError for a dtype, dynamic dim or range that cannot work."""
        if self.inductor_configs:
            from .compile import check_inductor_configs

            if self.format != "pt2":
                raise InputError("--inductor-config applies to .pt2 packages; an ONNX file is not compiled by Inductor")
            self.inductor_configs = check_inductor_configs(self.inductor_configs)
        if self.dtype not in DTYPES and self.dtype not in INPUT_DTYPES:
            raise InputError(
                f"unsupported dtype {self.dtype!r}; expected one of {', '.join(DTYPES)}, or for a --model's "
                f"inputs {', '.join(INPUT_DTYPES)}"
            )
        if self.model is None and self.dtype not in DTYPES:
            raise InputError(
                f"--dtype {self.dtype} applies to the inputs of a model given with --model; the IdentityModel's "
                f"conv layers take {', '.join(DTYPES)}"
            )
        if self.format not in FORMATS:
            raise InputError(f"unknown format {self.format!r}; expected one of {', '.join(FORMATS)}")
        self._check_format()
        if self.model is not None:
            if self.dynamic or self.variant != "functional":
                raise InputError(
                    "--dynamic and --variant apply to the built-in IdentityModel; with --model, "
                    "give dynamic dims with --dynamic-dim INPUT.DIM=MIN:MAX"
                )
            return
        if self.input_values:
            raise InputError("--input-values applies to a model given with --model; the IdentityModel takes no integer input")
        if self.input_shapes or self.dynamic_dims or self.model_args:
            raise InputError(
                "--input-shape, --dynamic-dim and --model-arg apply to a model given with --model; "
                "the built-in IdentityModel takes --batch/--channels/--height/--width and --dynamic"
            )
        if self.variant not in MODEL_VARIANTS:
            raise InputError(f"unknown model variant {self.variant!r}; expected one of {', '.join(MODEL_VARIANTS)}")
        for name in self.dynamic:
            if name not in DYNAMIC_DIMS:
                raise InputError(f"cannot make {name!r} dynamic; choose from {', '.join(DYNAMIC_DIMS)}")
            low, high = self.ranges[name]
            size = self.shape()[DYNAMIC_DIMS[name]]
            if not 1 <= low < high:
                raise InputError(f"--{name}-range {low}:{high} holds fewer than two sizes; expected 1 <= MIN < MAX")
            if not low <= size <= high:
                raise InputError(
                    f"--{name} {size} is outside --{name}-range {low}:{high}; the example input must lie in the range"
                )


@dataclass
class BuildResult:
    package_path: Path
    spec: PackageSpec
    calls: GraphCalls
    graph: str
    example_inputs: list[torch.Tensor]
    # (what was compared, its comparison), e.g. ("eager vs package [1, 3, 224, 224]", ...)
    checks: list[tuple[str, Comparison]]
    op_libraries: list[Path]
    tolerance: Tolerance = field(default_factory=Tolerance)
    model_name: str = "IdentityModel"
    reference_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    # False when the build failed its checks: nothing was written at package_path
    # (a package already there is untouched).
    written: bool = True
    # True when the package at the output was reused (same cache key): export,
    # compile and verify were skipped, and `checks` are those of the build that made it.
    cached: bool = False
    # True when that package's compiled code was reused but verified again, under a
    # rule other than the one it recorded.
    reverified: bool = False
    # ONNX target only: (domain, op type) of each node, and the torchbind routes taken.
    onnx_nodes: list[tuple[str, str]] = field(default_factory=list)
    onnx_routes: list[str] = field(default_factory=list)

    @property
    def example_input(self) -> torch.Tensor:
        return self.example_inputs[0]

    @property
    def bit_identical(self) -> bool:
        return all(comparison.bits.identical for _, comparison in self.checks)

    @property
    def passed(self) -> bool:
        """Every output within ``tolerance`` of eager's, at every checked shape."""
        return list_verdict([comparison for _, comparison in self.checks]) != FAILED


def seeded_input(
    shape: tuple[int, ...], dtype: str, device: str, seed: int, values: tuple[int, int] | None = None
) -> torch.Tensor:
    """A standard-normal tensor, drawn in float32 on the CPU so every dtype and
    device sees the same values for a seed; for an integer or bool dtype, uniform
    integers in ``values`` (inclusive; default 0 and 1, see DEFAULT_RANDOM_VALUES),
    drawn as int64 and cast, as the runners draw them."""
    generator = torch.Generator().manual_seed(seed)
    if dtype in DTYPES:
        return torch.randn(shape, generator=generator).to(DTYPES[dtype]).to(device)
    low, high = values or DEFAULT_RANDOM_VALUES
    # random_'s upper bound is exclusive; None draws up to int64's largest value.
    upper = None if high == INT64_MAX else high + 1
    drawn = torch.empty(shape, dtype=torch.int64).random_(low, upper, generator=generator)
    return drawn.to(INTEGER_DTYPES[dtype]).to(device)


def spec_dynamic_dims(spec: PackageSpec) -> list[DynamicDim]:
    """The package's dynamic dims as the spec records them: each group of shared
    positions as one, every other non-static dim alone. The Python API gives its
    dynamic shapes in torch's own form; this is what they came to."""
    dims: list[DynamicDim] = []
    grouped = {position for group in spec.shared_dims for position in group}
    for group in spec.shared_dims:
        i, d = group[0]
        dim = spec.inputs[i].dims[d]
        dims.append(DynamicDim(tuple(group), dim.min, dim.max))
    for i, tensor in enumerate(spec.inputs):
        for d, dim in enumerate(tensor.dims):
            if not dim.is_static and (i, d) not in grouped:
                dims.append(DynamicDim(((i, d),), dim.min, dim.max))
    return dims


def second_inputs(
    inputs: list[torch.Tensor], dynamic_dims: list[DynamicDim], seed: int
) -> list[torch.Tensor] | None:
    """Random inputs of other sizes in the dynamic ranges, to prove the package is
    not specialised to the example. None without dynamic dims, or when an input's
    dtype has no random values (complex, float8).

    With floating inputs only, each dynamic dim is at its minimum (or one above the
    example, if that is the minimum). With an integer or bool input, each dynamic
    dim is one above the example where the range allows (an index valid into a dim
    of the example's size stays valid in a larger one; a smaller one could make eager
    raise, or a kernel abort), and each integer input draws its values between the
    example's smallest and largest (bool: 0 and 1): a value range the package records
    is an interval, so it holds them."""
    dtypes = [dtype_name(x.dtype) for x in inputs]
    if not dynamic_dims or not all(dtype in DTYPES or dtype in INTEGER_DTYPES for dtype in dtypes):
        return None
    grow = any(dtype in INTEGER_DTYPES for dtype in dtypes)
    shapes = [list(x.shape) for x in inputs]
    for dynamic in dynamic_dims:
        i, d = dynamic.positions[0]
        above = shapes[i][d] + 1 if dynamic.max is None or shapes[i][d] < dynamic.max else None
        # The range holds two sizes or more, so one of these differs from the example.
        size = above if (grow or dynamic.min == shapes[i][d]) and above is not None else dynamic.min
        for i, d in dynamic.positions:
            shapes[i][d] = size
    drawn = []
    for i, (shape, x, dtype) in enumerate(zip(shapes, inputs, dtypes)):
        span = None
        if dtype in INTEGER_DTYPES and dtype != "bool" and x.numel():
            as_int64 = x.to(torch.int64)  # min/max are not implemented for every integer dtype
            span = (int(as_int64.min()), int(as_int64.max()))
        drawn.append(seeded_input(tuple(shape), dtype, str(x.device), seed + 1 + i, span))
    return drawn


def export_and_compile(
    config: BuildConfig,
    on_stage: Callable[[str], None] | None = None,
    model: nn.Module | None = None,
    example: CallInputs | None = None,
    dynamic_shapes: Any = None,
    program: torch.export.ExportedProgram | None = None,
) -> BuildResult:
    """Run every stage of export_compile.

    Args:
        config: what to build.
        on_stage: called with each stage's name (from STAGES) as it starts.
        model: an already built (e.g. trained) model to export instead of the one
            ``config`` names; it is an identity only if its ``is_identity`` says so.
        example: with ``model``, the example call (args and kwargs, nested, with
            Python scalars) to export with, as the Python API takes it; without it,
            ``model`` gets one random input of ``config``'s shape.
        dynamic_shapes: with ``example``, torch.export's own ``dynamic_shapes``.
        program: with ``example``, a program already exported from ``model``
            (its ``module()``): compiled as it is, not exported again.

    Returns:
        The BuildResult. ``passed`` says whether the package's outputs are within
        the tolerance of eager's at every checked shape; the caller decides what a
        difference means.

    Raises:
        OpLibraryError, ModelError, ExportError, CompileError, PackageError,
        InputError, VerificationError: from the stages.
    """
    config.check()
    timings: dict[str, float] = {}

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        if on_stage:
            on_stage(name)
        start = time.perf_counter()
        yield
        timings[name] = time.perf_counter() - start

    with stage("load op libraries"):
        if config.op_libs:
            libraries = load_op_libraries(config.op_libs)
            if model is None and config.model is None:
                _require_identity_library(MODEL_VARIANTS[config.variant], libraries)
        elif config.model is None and example is None:
            libraries = [load_op_library()]
        else:
            libraries = []
        import_modules(config.fake_modules)

    with stage("build model"):
        if model is None and config.model is None:
            model = MODEL_VARIANTS[config.variant](config.channels)
        if example is not None:
            if model is None:
                raise InputError("an example call needs the model it calls")
            example.check_leaves()
            model = model.to(device=config.device)
            if not isinstance(model, torch.fx.GraphModule):  # an ExportedProgram's module() refuses eval()
                model = model.eval()
            example = example.map_tensors(lambda x: x.detach().to(config.device))
            inputs = example.tensors()
            if not inputs:
                raise InputError("the example call has no tensor input; a package takes at least one tensor")
            traced, dynamic_dims = list(inputs), []
        elif model is not None:
            model = model.to(device=config.device, dtype=DTYPES[config.dtype]).eval()
            inputs = [seeded_input(config.shape(), config.dtype, config.device, config.seed)]
            dynamic_dims = [
                DynamicDim(((0, DYNAMIC_DIMS[name]),), *config.ranges[name], label=name) for name in config.dynamic
            ]
            traced = inputs if config.export_shape() == config.shape() else [
                seeded_input(config.export_shape(), config.dtype, config.device, config.seed)
            ]
        else:
            model, inputs, traced, dynamic_dims, example = _build_user_model(config)
        call = example if example is not None else CallInputs(tuple(inputs))
        model_name = config.model or type(model).__name__
        # Identity is the IdentityModel's contract, so it is held to the same bits.
        tolerance = config.tolerance or Tolerance(BITWISE if getattr(model, "is_identity", False) else CLOSE)
        if config.format == "onnx":
            # ONNX export takes seconds: no compile cache.
            key, cached = "", None
        else:
            # The rule is not in the key: it changes the check, not the compiled code.
            key = _cache_key(config, model, inputs, traced, dynamic_dims, libraries, call, dynamic_shapes)
            cached = None if config.force else _cached_spec(config.output, key)

    if config.format == "onnx":
        if example is not None and (example.kwargs or len(example.tensors()) != len(example.leaves())):
            raise InputError(
                "the ONNX target takes a model called with tensors by position; this one takes keyword or "
                "non-tensor inputs (export it as a .pt2 package)"
            )
        return _export_onnx(
            config, model, inputs, traced, dynamic_dims, libraries, model_name, tolerance, stage, timings
        )

    if cached is not None and cached.eager_check == tolerance:
        for name in ("export", "compile", "verify"):
            with stage(name):
                pass
        if config.save_reference is not None:
            with torch.no_grad():
                eager = flatten_outputs(call.call(model))
            outputs = load_package(config.output, cached).run(list(inputs))
            _save_reference(config.save_reference, inputs, outputs, eager)
        return BuildResult(
            package_path=config.output,
            spec=cached,
            calls=GraphCalls(sorted({op.name for op in cached.required_ops}), cached.required_classes),
            graph="(the package at the output was built from the same inputs: export and compile skipped)",
            example_inputs=inputs,
            checks=_recorded_checks(cached, tolerance),
            op_libraries=libraries,
            tolerance=tolerance,
            model_name=model_name,
            reference_dir=config.save_reference,
            timings=timings,
            cached=True,
        )

    if cached is not None:
        # The same compiled code, held to another rule: verify it again, on a copy.
        for name in ("export", "compile"):
            with stage(name):
                pass
        calls = GraphCalls(sorted({op.name for op in cached.required_ops}), cached.required_classes)
        graph = "(the package at the output was built from the same inputs: export and compile skipped)"
        staging = _staging_path(config.output)
        try:
            shutil.copyfile(config.output, staging)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
        package_path = staging
    else:
        calls, graph, package_path, staging = _export_and_compile_package(
            config, model, call.with_tensors(traced), dynamic_dims, dynamic_shapes, libraries, tolerance, stage,
            program,
        )

    with stage("verify"):
        try:
            spec = read_package_spec(package_path)
            if config.verify:
                package = load_package(package_path, spec)
                checks, outputs, eager = _verify_against_eager(
                    model, inputs, dynamic_dims or spec_dynamic_dims(spec), config.seed, package.run, "the package",
                    "package", tolerance, call,
                )
                if config.save_reference is not None:
                    _save_reference(config.save_reference, inputs, outputs, eager)
            else:
                checks = []
            passed = list_verdict([comparison for _, comparison in checks]) != FAILED
            if passed:
                # The key is recorded only in a package that passed, so only such a
                # package is ever reused; an unchecked one records no checks.
                spec.cache_key = key if config.verify else ""
                spec.eager_check = tolerance
                spec.verified = [[label, _record(comparison)] for label, comparison in checks]
                rewrite_package_metadata(package_path, package_path, spec.to_metadata())
                package_path = staging.replace(config.output)
        finally:
            staging.unlink(missing_ok=True)

    return BuildResult(
        package_path=config.output,
        written=passed,
        spec=spec,
        calls=calls,
        graph=graph,
        example_inputs=inputs,
        checks=checks,
        op_libraries=libraries,
        tolerance=tolerance,
        model_name=model_name,
        reference_dir=config.save_reference,
        timings=timings,
        reverified=cached is not None,
    )


def _export_and_compile_package(
    config: BuildConfig,
    model: nn.Module,
    traced: CallInputs,
    dynamic_dims: list[DynamicDim],
    dynamic_shapes: Any,
    libraries: list[Path],
    tolerance: Tolerance,
    stage: Callable[[str], AbstractContextManager[None]],
    program: torch.export.ExportedProgram | None = None,
) -> tuple[GraphCalls, str, Path, Path]:
    """The export and compile stages: the graph's calls, the graph as text, and the
    package compiled beside --output under a temporary name (its path twice: the
    package to verify, and the staging file to remove if verification fails)."""
    with stage("export"):
        # Packages are for inference: tracing without autograd keeps the graph free of
        # training-only state (and lets out= ops, which refuse autograd, export).
        if program is None:
            with torch.no_grad():
                program = export_model(model, traced, dynamic_dims, dynamic_shapes)
        # Refused before the compile, which takes seconds to minutes.
        check_tensor_outputs(program)
        constants = constant_inputs(program, traced)
        optimization = optimize_program(program).summary() if config.optimize else "off (--no-optimize)"
        calls = graph_calls(program)
        if isinstance(model, IdentityModel):
            _check_identity_layers(model, calls)
        python_ops = python_only_ops(calls.op_refs(), config.device)
        if python_ops and not config.allow_python_ops:
            raise _python_ops_error(python_ops, "the exported graph calls")
        # The ranges follow inputs straight into index ops, so they are read before
        # the guards put a check between the two.
        inputs = record_value_ranges(program, input_specs(program), config.input_values)
        graph_text = str(program.graph)  # the user's graph, before the checks and Inductor's decompositions
        program, guards = guard_indices(program)

    with stage("compile"):
        spec = PackageSpec(
            inputs=inputs,
            outputs=output_specs(program),
            device=config.device,
            torch_version=torch.__version__,
            required_ops=calls.op_refs(),
            required_classes=calls.classes,
            op_libraries=libraries_for([op for op in calls.ops if op not in python_ops] + calls.classes),
            op_library_namespaces=namespaces_by_library([op for op in calls.ops if op not in python_ops] + calls.classes),
            is_identity=bool(getattr(model, "is_identity", False)),
            example_shapes=[tuple(x.shape) for x in traced.tensors()],
            cpu_flags=target_cpu_flags(config.cpu_target),
            cpu_target=config.cpu_target,
            python_only_ops=sorted(python_ops),
            fake_modules=list(config.fake_modules) + _defining_modules(python_ops, config.model),
            optimizations=f"{optimization}; {guards.summary()}",
            shared_dims=shared_dims(program),
            eager_check=tolerance,
            constant_inputs=constants,
            inductor_configs=dict(config.inductor_configs),
        )
        # Built beside --output under a temporary name, and moved there only once it
        # passed: a failed build never replaces (or destroys) a good package.
        staging = _staging_path(config.output)
        try:
            package_path = compile_with_checks_outside_parallel(
                lambda: compile_package(program, staging, spec, config.cpu_target, config.inductor_configs),
                guards.messages)
            _record_called_ops(package_path, spec, calls, config)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise

    return calls, graph_text, package_path, staging


def _record(comparison: Comparison) -> dict[str, Any]:
    """A comparison as the spec's ``verified`` entry keeps it, for a cache hit's report."""
    return {
        "bits": dataclasses.asdict(comparison.bits),
        "dtype": dtype_name(comparison.dtype),
        "num_outside": comparison.num_outside,
        "first_outside": comparison.first_outside,
    }


def _recorded_checks(spec: PackageSpec, tolerance: Tolerance) -> list[tuple[str, Comparison]]:
    """The checks a cached package passed, from its ``verified`` entry.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: an entry of another form
            (e.g. from an older toolkit); the caller treats that as a cache miss.
    """
    checks = []
    for label, fields in spec.verified:
        bits = BitReport(**{**fields["bits"], "first_index": tuple(fields["bits"]["first_index"] or ()) or None})
        dtype = getattr(torch, fields["dtype"])
        checks.append((label, Comparison(bits, tolerance, dtype, fields["num_outside"], fields["first_outside"])))
    return checks


def _verify_against_eager(
    model: nn.Module,
    inputs: list[torch.Tensor],
    dynamic_dims: list[DynamicDim],
    seed: int,
    run: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    what: str,
    label: str,
    tolerance: Tolerance,
    call: CallInputs | None = None,
) -> tuple[list[tuple[str, Comparison]], list[torch.Tensor], list[torch.Tensor]]:
    """Run ``run`` on the example inputs (and, with dynamic dims, on inputs of other
    sizes) and compare each output with eager's under ``tolerance``.

    Returns:
        The labelled comparisons, and ``run``'s and eager's outputs for the example
        inputs.
    """
    checks: list[tuple[str, Comparison]] = []
    example_outputs: list[torch.Tensor] = []
    reference_outputs: list[torch.Tensor] = []
    runs = [inputs] + ([more] if (more := second_inputs(inputs, dynamic_dims, seed)) else [])
    for run_inputs in runs:
        with torch.no_grad():
            eager = flatten_outputs(model(*run_inputs) if call is None else call.with_tensors(run_inputs).call(model))
        outputs = run(list(run_inputs))
        if len(outputs) != len(eager):
            raise VerificationError(f"{what} returned {len(outputs)} output(s) where eager returns {len(eager)}")
        reference_outputs = reference_outputs or eager
        example_outputs = example_outputs or outputs
        shapes = " ".join(str(list(x.shape)) for x in run_inputs)
        for j, (actual, expected) in enumerate(zip(outputs, eager)):
            name = f"eager vs {label} {shapes}" + (f" output[{j}]" if len(eager) > 1 else "")
            checks.append((name, compare(actual, expected, tolerance)))
    return checks, example_outputs, reference_outputs


def _export_onnx(
    config: BuildConfig,
    model: nn.Module,
    inputs: list[torch.Tensor],
    traced: list[torch.Tensor],
    dynamic_dims: list[DynamicDim],
    libraries: list[Path],
    model_name: str,
    tolerance: Tolerance,
    stage: Callable[[str], AbstractContextManager[None]],
    timings: dict[str, float],
) -> BuildResult:
    """The ONNX target's export, convert and verify stages (see onnx_export.py). The
    file's outputs are checked against eager in onnxruntime, under ``tolerance``."""
    from .onnx_export import prepare_onnx

    with stage("export"):
        prepared = prepare_onnx(model, traced, dynamic_dims, config.onnx_mode)
    # Written beside --output under a temporary name and moved there only once it
    # passed, as a .pt2 package is: exit 2 (or 1) leaves nothing at --output.
    staging = _staging_path(config.output, ".onnx")
    try:
        return _convert_and_verify_onnx(config, model, inputs, dynamic_dims, libraries, model_name, tolerance, stage,
                                        timings, prepared, staging)
    finally:
        staging.unlink(missing_ok=True)


def _convert_and_verify_onnx(
    config: BuildConfig,
    model: nn.Module,
    inputs: list[torch.Tensor],
    dynamic_dims: list[DynamicDim],
    libraries: list[Path],
    model_name: str,
    tolerance: Tolerance,
    stage: Callable[[str], AbstractContextManager[None]],
    timings: dict[str, float],
    prepared: Any,
    staging: Path,
) -> BuildResult:
    from .onnx_export import convert_onnx
    from ..runtime.onnx_runtime import load_onnx

    with stage("convert to ONNX"):
        extras: dict[str, Any] = {
            "is_identity": bool(getattr(model, "is_identity", False)),
            "example_shapes": [tuple(x.shape) for x in inputs],
            "fake_modules": list(config.fake_modules),
            # Custom-domain nodes run the op libraries' kernels; portable files need none.
            "op_libraries": libraries_for(prepared.ops) if config.onnx_mode == "custom-domain" else [],
            "op_library_namespaces": namespaces_by_library(prepared.ops) if config.onnx_mode == "custom-domain" else {},
            "eager_check": tolerance,
        }
        exported = convert_onnx(prepared, staging, extras)
    with stage("verify"):
        spec = exported.spec
        try:
            session = load_onnx(staging, spec)
            checks, outputs, eager = _verify_against_eager(
                model, inputs, dynamic_dims, config.seed, session.run, "the ONNX file", "onnxruntime", tolerance
            )
        except PackageError as error:
            # The messages name the file as the user will know it, not its temporary name.
            reason = str(error).replace(str(staging), str(config.output))
            raise ExportError(
                f"the ONNX file for {config.output} passes onnx.checker, but it cannot be verified here, so it was "
                f"not written: {reason}"
            ) from error
        if config.save_reference is not None:
            _save_reference(config.save_reference, inputs, outputs, eager)
        passed = list_verdict([comparison for _, comparison in checks]) != FAILED
        if passed:
            staging.replace(config.output)
    return BuildResult(
        package_path=config.output,
        written=passed,
        spec=spec,
        calls=GraphCalls(exported.ops, [route.split(".")[0] for route in exported.routes]),
        graph=exported.graph,
        example_inputs=inputs,
        checks=checks,
        op_libraries=libraries,
        tolerance=tolerance,
        model_name=model_name,
        reference_dir=config.save_reference,
        timings=timings,
        onnx_nodes=exported.nodes,
        onnx_routes=exported.routes,
    )


def _build_user_model(
    config: BuildConfig,
) -> tuple[nn.Module, list[torch.Tensor], list[torch.Tensor], list[DynamicDim], CallInputs | None]:
    """The user's model in eval mode on the device, its example inputs (from the
    factory, else random of ``input_shapes``), the inputs to trace with, the
    dynamic dims checked against the inputs, and the factory's whole example call
    (None without one: the inputs are the call)."""
    assert config.model is not None
    model, factory_call = load_model(config.model, config.model_args)
    model = model.to(device=config.device).eval()
    factory_inputs = None
    if factory_call is not None:
        if config.input_shapes:
            raise InputError(
                f"--model {config.model} returns its own example inputs, so --input-shape is not used; drop it"
            )
        factory_call = factory_call.map_tensors(lambda x: x.to(config.device))
        factory_inputs = inputs = factory_call.tensors()
    else:
        if not config.input_shapes:
            raise InputError(
                f"--model {config.model} returns a module only, so its example inputs need shapes: "
                "pass --input-shape once per forward argument (e.g. --input-shape 1,3,224,224), "
                "or let the factory return (module, example_inputs)"
            )
        if config.dtype in DTYPES:  # an integer --dtype is the inputs' alone
            model = model.to(dtype=DTYPES[config.dtype])
        inputs = [
            seeded_input(shape, config.dtype, config.device, config.seed + i, config.input_values.get(i))
            for i, shape in enumerate(config.input_shapes)
        ]
    traced = [x for x in inputs]
    for dynamic in config.dynamic_dims:
        sizes = {
            f"input {i} dim {d}": inputs[i].shape[d]
            for i, d in dynamic.positions
            if i < len(inputs) and d < inputs[i].dim()
        }
        if len(set(sizes.values())) > 1:
            raise InputError(
                f"--dynamic-dim {dynamic}: these positions share one size, but the example inputs differ "
                f"there ({', '.join(f'{k}: {v}' for k, v in sizes.items())}); give them the same size or "
                "separate --dynamic-dim options"
            )
        for i, d in dynamic.positions:
            if i >= len(inputs) or d >= inputs[i].dim():
                raise InputError(
                    f"--dynamic-dim {dynamic}: there is no dim {d} of input {i}; the example inputs have "
                    f"shapes {', '.join(str(list(x.shape)) for x in inputs)}"
                )
            size = inputs[i].shape[d]
            if size < dynamic.min or (dynamic.max is not None and size > dynamic.max):
                raise InputError(
                    f"--dynamic-dim {dynamic}: the example input {i} has size {size} in dim {d}, outside "
                    f"{str(dynamic).partition('=')[2]}; the example must lie in the range"
                )
            if size == 1:
                # torch.export specialises a size-1 example dim to 1; trace at 2 instead.
                if factory_inputs is not None:
                    raise InputError(
                        f"--dynamic-dim {dynamic}: example input {i} has size 1 in dim {d}, which "
                        "torch.export fixes to 1; give an example of size >= 2 there"
                    )
                shape = list(traced[i].shape)
                shape[d] = 2
                traced[i] = seeded_input(
                    tuple(shape), config.dtype, config.device, config.seed + i, config.input_values.get(i)
                )
    return model, inputs, traced, list(config.dynamic_dims), factory_call


def _cache_key(
    config: BuildConfig, model: nn.Module, inputs: list[torch.Tensor], traced: list[torch.Tensor],
    dynamic_dims: list[DynamicDim], libraries: list[Path], call: CallInputs, dynamic_shapes: Any,
) -> str:
    """The compile-cache key of this build (see cache.py). The op libraries counted
    are those this build loaded (--op-lib, or the default one)."""
    options = {
        "device": config.device,
        "dtype": config.dtype,
        "variant": config.variant if config.model is None else None,
        "model": config.model,
        "model_args": repr(sorted(config.model_args.items())),
        "dynamic": [str(d) for d in dynamic_dims],
        "optimize": config.optimize,
        "allow_python_ops": config.allow_python_ops,
        "fake_modules": list(config.fake_modules),
        "cpu_target": config.cpu_target,
        # The call's structure with its Python scalars (baked in), and the API's
        # dynamic shapes. Version 2 of the spec's contents records names.
        "call": repr(call.with_tensors([None] * len(inputs))),
        "dynamic_shapes": repr(dynamic_shapes),
        "contents": 2,
        **({"inductor_configs": sorted(config.inductor_configs.items())} if config.inductor_configs else {}),
        # Only when given, so the keys of packages built without it stay as they were.
        **({"input_values": sorted(config.input_values.items())} if config.input_values else {}),
    }
    modules = list(config.fake_modules) + ([config.model.split(":")[0]] if config.model else [])
    return cache_key(model, inputs, traced, libraries, modules, options, target_cpu_flags(config.cpu_target))


def _cached_spec(output: Path, key: str) -> PackageSpec | None:
    """The spec of the package at ``output`` if it was built (and verified) from the
    same inputs, else None."""
    if not output.is_file():
        return None
    try:
        spec = read_package_spec(output)
    except PackageError:
        return None
    if spec.cache_key != key or not spec.verified or spec.eager_check is None:
        return None
    try:
        _recorded_checks(spec, spec.eager_check)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return spec


def _staging_path(output: Path, suffix: str = ".pt2") -> Path:
    """A fresh temporary path in ``output``'s folder (so the final rename is atomic)."""
    import tempfile

    output.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.stem}.", suffix=suffix)
    os.close(handle)
    return Path(name)


def _save_reference(
    folder: Path, inputs: list[torch.Tensor], outputs: list[torch.Tensor], eager: list[torch.Tensor]
) -> None:
    save_tensors(folder / REFERENCE_INPUTS, inputs)
    save_tensors(folder / REFERENCE_OUTPUTS, outputs)
    save_tensors(folder / REFERENCE_EAGER, eager)


def _python_ops_error(python_ops: dict[str, str], where: str) -> ExportError:
    reasons = "; ".join(f"{op}: {reason}" for op, reason in python_ops.items())
    return ExportError(
        f"{where} {', '.join(python_ops)}, which the C++ runtime cannot run ({reasons}). The C++ "
        "runtime has no Python to run such an op: define its schema and kernels in C++ "
        "(TORCH_LIBRARY) and load the library with --op-lib, or pass --allow-python-ops to "
        "write a package for the Python runtime only."
    )


def _record_called_ops(package_path: Path, spec: PackageSpec, calls: GraphCalls, config: BuildConfig) -> None:
    """Make the package's recorded needs those of the compiled code: the custom ops it
    really calls (Inductor compiles some into its own kernels), the Python-only ones
    among them, and the libraries that register them. A Python-only op that Inductor
    was expected to compile but did not is refused here, and the package removed."""
    called = package_extern_ops(package_path)
    late = python_only_ops(called, config.device)
    if late and not config.allow_python_ops:
        package_path.unlink(missing_ok=True)
        raise _python_ops_error(late, "the compiled package calls")
    python_ops = sorted(late)
    needed = sorted({op.name for op in called if op.name not in late}) + calls.classes
    libraries, namespaces = libraries_for(needed), namespaces_by_library(needed)
    if (called, python_ops, libraries, namespaces) == (
        spec.required_ops, spec.python_only_ops, spec.op_libraries, spec.op_library_namespaces
    ):
        return
    spec.required_ops, spec.python_only_ops, spec.op_libraries = called, python_ops, libraries
    spec.op_library_namespaces = namespaces
    if not python_ops:
        spec.fake_modules = list(config.fake_modules)
    rewrite_package_metadata(package_path, package_path, spec.to_metadata())


def _require_identity_library(model_class: type[IdentityModel], libraries: list[Path]) -> None:
    """The libraries given with --op-lib are all that is loaded: when none registers
    what the IdentityModel calls, say so instead of loading the default one behind
    the user's back."""
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


def _check_identity_layers(model: IdentityModel, calls: GraphCalls) -> None:
    custom_op = "my_ops::identity_conv_op_out" if isinstance(model, IdentityOutModel) else "my_ops::identity_conv_op"
    if "my_ops::IdentityConvClass" not in calls.classes or custom_op not in calls.ops:
        raise ExportError(
            f"the exported graph lost a custom layer: it calls ops {calls.ops} and classes "
            f"{calls.classes}, expected {custom_op} and my_ops::IdentityConvClass"
        )


def _defining_modules(python_ops: dict[str, str], model_target: str | None) -> list[str]:
    """The model's module, when Python-only ops are allowed: the Python runtime must
    import it (or the module that defines the ops) to run the package."""
    if not python_ops or model_target is None:
        return []
    return [model_target.split(":")[0]]
