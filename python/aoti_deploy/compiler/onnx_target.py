"""The ONNX target's route from an exported model: prepare and convert it to an ONNX
file (onnx_export.py), check the file in onnxruntime against eager under the same
rule as a package, and put it at the output only if it passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ExportError, InputError, PackageError
from ..ops.loader import libraries_for, namespaces_by_library
from ..runtime.tensor_files import save_references
from ..verify.tolerance import FAILED, list_verdict
from .eager_check import verify_against_eager
from .export import GraphCalls
from .result import BuildResult
from .stages import ExportRun
from .staging import staging_path


def export_onnx_file(run: ExportRun) -> BuildResult:
    """The ONNX target's export, convert and verify stages. The file's outputs are
    checked against eager in onnxruntime, under the run's tolerance; a file that
    fails is not written (exit 1 leaves nothing at the output, as for a .pt2
    package)."""
    from .onnx_export import prepare_onnx

    call = run.example.call
    if call.kwargs or len(call.tensors()) != len(call.leaves()):
        raise InputError(
            "the ONNX target takes a model called with tensors by position; this one takes keyword or "
            "non-tensor inputs (export it as a .pt2 package)"
        )
    with run.stage("export"):
        prepared = prepare_onnx(run.example.model, run.example.traced, run.example.dynamic_dims,
                                run.options.onnx_mode)
    staging = staging_path(run.output, ".onnx")
    try:
        return _convert_and_verify(run, prepared, staging)
    finally:
        staging.unlink(missing_ok=True)


def _convert_and_verify(run: ExportRun, prepared: Any, staging: Path) -> BuildResult:
    from ..runtime.onnx_runtime import load_onnx
    from .onnx_export import convert_onnx

    example, options, output = run.example, run.options, run.output
    custom_domain = options.onnx_mode == "custom-domain"
    with run.stage("convert to ONNX"):
        extras: dict[str, Any] = {
            "is_identity": bool(getattr(example.model, "is_identity", False)),
            "example_shapes": [tuple(x.shape) for x in example.inputs],
            "fake_modules": list(options.fake_modules),
            # Custom-domain nodes run the op libraries' kernels; portable files need none.
            "op_libraries": libraries_for(prepared.ops) if custom_domain else [],
            "op_library_namespaces": namespaces_by_library(prepared.ops) if custom_domain else {},
            "eager_check": run.tolerance,
        }
        exported = convert_onnx(prepared, staging, extras)
    with run.stage("verify"):
        spec = exported.spec
        try:
            session = load_onnx(staging, spec)
            checks, outputs, eager = verify_against_eager(
                example.model, example.call, example.dynamic_dims, options.seed, session.run, "the ONNX file",
                "onnxruntime", run.tolerance, spec,
            )
        except PackageError as error:
            # The messages name the file as the user will know it, not its temporary name.
            reason = str(error).replace(str(staging), str(output))
            raise ExportError(
                f"the ONNX file for {output} passes onnx.checker, but it cannot be verified here, so it was "
                f"not written: {reason}"
            ) from error
        if options.references is not None:
            save_references(options.references, example.inputs, outputs, eager, spec.named_outputs(len(outputs)))
        passed = list_verdict([comparison for _, comparison in checks]) != FAILED
        if passed:
            staging.replace(output)
    return BuildResult(
        package_path=output,
        written=passed,
        spec=spec,
        calls=GraphCalls(exported.ops, [route.split(".")[0] for route in exported.routes]),
        graph=exported.graph,
        example_inputs=example.inputs,
        checks=checks,
        op_libraries=run.libraries,
        tolerance=run.tolerance,
        model_name=example.name,
        reference_dir=options.references,
        timings=run.timings,
        onnx_nodes=exported.nodes,
        onnx_routes=exported.routes,
    )
