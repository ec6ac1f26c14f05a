"""The export and compile stages of a .pt2 package: export the model, refuse what C++
cannot run before the compile, rewrite the graph (bit-exact optimizations, index
checks), compile it beside the output under a temporary name, and make the package's
recorded needs those of the compiled code."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..errors import ExportError
from ..models.identity import IdentityModel, IdentityOutModel
from ..ops.loader import libraries_for, namespaces_by_library
from ..package.archive import rewrite_package_metadata
from ..package.host import host_cpu_flags, target_cpu_flags
from ..package.spec import PackageSpec
from ..verify.tolerance import CLOSE, Tolerance
from .compile import compile_package
from .export import (
    GraphCalls,
    export_model,
    graph_calls,
    input_specs,
    output_specs,
    outputs_by_name,
    package_extern_ops,
    python_only_ops,
    shared_dims,
)
from .index_guards import compile_with_checks_outside_parallel, guard_indices
from .optimize import optimize_program
from .precision import BF16_FLAGS, BF16Model, bf16_flag

# The host flags of int8 dot products (oneDNN's u8*s8 kernels), as an int8 package records them.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
from .quantize import calibration_calls, check_int8_kernels, drift, quantize_module, quantized_counts
from .options import ExportOptions
from .stages import ExportRun
from .staging import staging_path
from .structure import constant_inputs, scalar_outputs_as_tensors
from .value_ranges import record_value_ranges


@dataclass
class ExportedGraph:
    """What the export stage hands the compile stage: the program with its index
    checks, the spec the package will record (its Inductor settings still to come),
    the graph's calls and the user's graph as text."""

    program: torch.export.ExportedProgram
    spec: PackageSpec
    calls: GraphCalls
    graph_text: str
    guard_messages: Any
    # An int8 export: the quantization record, its compiled kernels still to count.
    quantization: dict[str, Any] | None = None


def export_graph(
    run: ExportRun, dynamic_shapes: Any = None, program: torch.export.ExportedProgram | None = None,
) -> ExportedGraph:
    """The export stage: export the model (or take ``program``), refuse what C++
    cannot run, rewrite the graph, and write the spec the package will carry."""
    example, options, stage = run.example, run.options, run.stage
    traced = example.call.with_tensors(example.traced)
    with stage("export"):
        # Packages are for inference: tracing without autograd keeps the graph free of
        # training-only state (and lets out= ops, which refuse autograd, export).
        precision_note = ""
        if options.precision == "bf16":
            if program is not None:
                raise ExportError("precision='bf16' converts the model before it is exported, and this export was "
                                  "given an ExportedProgram: pass the nn.Module instead, or export it in bf16 yourself")
            precision_note = _to_bf16(run)
            example = run.example
        if program is None:
            with torch.no_grad():
                program = export_model(example.model, traced, example.dynamic_dims, dynamic_shapes)
        quantization = None
        if options.quantize:
            program, quantization = _quantize(run, program, traced, dynamic_shapes)
            example = run.example
        # Refused before the compile, which takes seconds to minutes; a Python int,
        # float or bool output becomes a 0-d tensor of its kind from here on.
        output_kinds = scalar_outputs_as_tensors(program)
        constants = constant_inputs(program, traced)
        optimization = optimize_program(program).summary() if options.optimize else "off (--no-optimize)"
        calls = graph_calls(program)
        if isinstance(example.model, IdentityModel):
            _check_identity_layers(example.model, calls)
        python_ops = python_only_ops(calls.op_refs(), options.device)
        if python_ops and not options.allow_python_ops:
            raise python_ops_error(python_ops, "the exported graph calls")
        # The ranges follow inputs straight into index ops, so they are read before
        # the guards put a check between the two.
        inputs = record_value_ranges(program, input_specs(program), options.input_values)
        graph_text = str(program.graph)  # the user's graph, before the checks and Inductor's decompositions
        program, guards = guard_indices(program)
        native = [op for op in calls.ops if op not in python_ops] + calls.classes
        outputs = output_specs(program, output_kinds)
        spec = PackageSpec(
            inputs=inputs,
            outputs=outputs,
            outputs_by_name=outputs_by_name(program, outputs),
            device=options.device,
            torch_version=torch.__version__,
            required_ops=calls.op_refs(),
            required_classes=calls.classes,
            op_libraries=libraries_for(native),
            op_library_namespaces=namespaces_by_library(native),
            is_identity=bool(getattr(example.model, "is_identity", False)),
            example_shapes=[tuple(x.shape) for x in traced.tensors()],
            cpu_flags=_cpu_flags(options),
            cpu_target=options.cpu_target,
            intra_op_threads=options.intra_op_threads(),
            python_only_ops=sorted(python_ops),
            fake_modules=list(options.fake_modules) + _defining_modules(python_ops, example.source_module),
            optimizations=f"{optimization}; {guards.summary()}{precision_note}",
            shared_dims=shared_dims(program),
            eager_check=run.tolerance,
            constant_inputs=constants,
        )
    return ExportedGraph(program, spec, calls, graph_text, guards.messages, quantization)


def _to_bf16(run: ExportRun) -> str:
    """The run's model becomes its bf16 copy (precision.py), the eager reference too;
    returns the note for the optimizations record, with the drift from fp32."""
    example, options = run.example, run.options
    others = sorted({str(t.dtype).removeprefix("torch.") for t in [*example.model.parameters(), *example.model.buffers()]
                     if t.is_floating_point() and t.dtype != torch.float32})
    if others:
        raise ExportError(f"precision='bf16' converts a float32 model, and this one holds {', '.join(others)} "
                          "weights: convert it to float32 first, or export it as it is")
    converted = BF16Model(example.model).eval()
    moved = drift(example.model, converted, [example.call])
    run.example = replace(example, model=converted)
    if options.tolerance is None:
        run.tolerance = drift_rule(moved["max_abs"])
    top1 = "" if moved["top1_agreement"] is None else f", top-1 agreement {100 * moved['top1_agreement']:.1f} %"
    return f"; bf16 (weights and compute; inputs and outputs float32): against the fp32 model max abs " \
           f"{moved['max_abs']:.3g}{top1}"


def drift_rule(moved: float) -> Tolerance:
    """The rule of a low-precision package against its model in eager: atol twice the
    largest distance lowering the precision moved the fp32 model's outputs, rtol 0.
    The compiled kernels round at other points than eager does (oneDNN requantizes
    its int32 sums once; its bf16 convolutions block their sums otherwise), and a
    flipped rounding moves a value by a whole step of the low precision, on through
    the layers after it. Two computations of one low-precision model that are each
    within that distance of fp32 are within twice it of each other."""
    return Tolerance(CLOSE, rtol=0.0, atol=2 * moved)


def int8_host_hint(options: ExportOptions, host_flags: set[str] | None = None) -> str:
    """Why an int8 package may fail its check on this host, and what to do; "" on a
    host with VNNI or for an export that is not int8."""
    flags = host_cpu_flags() if host_flags is None else host_flags
    if not options.quantize or flags & set(VNNI_FLAGS):
        return ""
    return ("this host has no VNNI (neither avx512_vnni nor avx_vnni): oneDNN's int8 kernels then add u8*s8 "
            "products in 16 bits, which saturate, so an int8 package can differ from its model beyond the rule. "
            "Export int8 packages on a host with VNNI (they need it to run as verified), or export in fp32")


def _cpu_flags(options: ExportOptions) -> list[str]:
    """The flags a host needs: the target's; for a bf16 package the flag that makes
    bfloat16 native, and for an int8 one this host's VNNI."""
    flags = target_cpu_flags(options.cpu_target)
    if options.precision == "bf16" and not set(flags) & set(BF16_FLAGS):
        flags = sorted([*flags, bf16_flag()])
    if options.quantize and not set(flags) & set(VNNI_FLAGS):
        # oneDNN picks its int8 kernels by the host's instructions at run time, and without
        # VNNI its u8*s8 sums saturate: other bits, beyond the package's rule.
        flags = sorted([*flags, *(set(VNNI_FLAGS) & host_cpu_flags())])
    return flags


def _quantize(run: ExportRun, program: torch.export.ExportedProgram, traced: Any,
              dynamic_shapes: Any) -> tuple[torch.export.ExportedProgram, dict[str, Any]]:
    """The program quantized (quantize.py) and exported again; the run's eager
    reference becomes the quantized model."""
    example, options = run.example, run.options
    calls = calibration_calls(options.calibration, example.call)
    converted = quantize_module(program, options.quantize, calls or [example.call])
    counts = quantized_counts(converted.graph)
    if not counts["convolutions"] + counts["linears"]:
        raise ExportError(
            f"quantize={options.quantize!r}: torchao's X86InductorQuantizer found no convolution or linear to "
            "quantize in this model, so an int8 package would be the fp32 one; export it without quantize"
        )
    record = {"mode": options.quantize, "calibration_calls": len(calls), **counts,
              **drift(example.model, converted, calls or [example.call])}
    run.example = replace(example, model=converted)
    if options.tolerance is None:
        run.tolerance = drift_rule(record["max_abs"])
    with torch.no_grad():
        program = export_model(converted, traced, example.dynamic_dims, dynamic_shapes)
    return program, record


def compile_staged(
    run: ExportRun, exported: ExportedGraph, inductor_configs: dict[str, Any], settings_note: str = "",
    label: str = "compile",
) -> Path:
    """The compile stage: the package compiled with ``inductor_configs`` (recorded in
    it) beside the output under a temporary name; the caller removes it if
    verification fails. ``settings_note`` is added to the recorded optimizations."""
    options = run.options
    spec = replace(exported.spec, inductor_configs=dict(inductor_configs))
    if settings_note:
        spec.optimizations = f"{spec.optimizations}; {settings_note}"
    with run.stage("compile", label):
        staging = staging_path(run.output)
        try:
            with warnings.catch_warnings():
                # Inductor's own int8 lowering copies a tensor with torch.tensor(); its warning is about
                # Inductor's code, not the user's.
                warnings.filterwarnings("ignore", "To copy construct from a tensor", UserWarning)
                package_path = compile_with_checks_outside_parallel(
                    lambda: compile_package(exported.program, staging, spec, options.cpu_target, inductor_configs),
                    exported.guard_messages)
            if exported.quantization is not None:
                spec.quantization = check_int8_kernels(package_path, exported.quantization, inductor_configs)
                rewrite_package_metadata(package_path, package_path, spec.to_metadata())
            _record_called_ops(package_path, spec, exported.calls, options)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
    return package_path


def python_ops_error(python_ops: dict[str, str], where: str) -> ExportError:
    reasons = "; ".join(f"{op}: {reason}" for op, reason in python_ops.items())
    return ExportError(
        f"{where} {', '.join(python_ops)}, which the C++ runtime cannot run ({reasons}). The C++ "
        "runtime has no Python to run such an op: define its schema and kernels in C++ "
        "(TORCH_LIBRARY) and load the library with op_libraries, or pass allow_python_ops=True to "
        "write a package for the Python runtime only."
    )


def _record_called_ops(package_path: Path, spec: PackageSpec, calls: GraphCalls, options: ExportOptions) -> None:
    """Make the package's recorded needs those of the compiled code: the custom ops it
    really calls (Inductor compiles some into its own kernels), the Python-only ones
    among them, and the libraries that register them. A Python-only op that Inductor
    was expected to compile but did not is refused here, and the package removed."""
    called = package_extern_ops(package_path)
    late = python_only_ops(called, options.device)
    if late and not options.allow_python_ops:
        package_path.unlink(missing_ok=True)
        raise python_ops_error(late, "the compiled package calls")
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
        spec.fake_modules = list(options.fake_modules)
    rewrite_package_metadata(package_path, package_path, spec.to_metadata())


def _check_identity_layers(model: IdentityModel, calls: GraphCalls) -> None:
    custom_op = "my_ops::identity_conv_op_out" if isinstance(model, IdentityOutModel) else "my_ops::identity_conv_op"
    if "my_ops::IdentityConvClass" not in calls.classes or custom_op not in calls.ops:
        raise ExportError(
            f"the exported graph lost a custom layer: it calls ops {calls.ops} and classes "
            f"{calls.classes}, expected {custom_op} and my_ops::IdentityConvClass"
        )


def _defining_modules(python_ops: dict[str, str], source_module: str | None) -> list[str]:
    """The model's module, when Python-only ops are allowed: the Python runtime must
    import it (or the module that defines the ops) to run the package."""
    if not python_ops or source_module is None:
        return []
    return [source_module]
