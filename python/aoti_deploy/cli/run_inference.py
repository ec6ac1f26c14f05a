"""run_inference: run an AOTI package (or a deploy bundle, verified first under a
trusted key) from Python, with its inputs validated against the package's recorded
spec, and check its outputs: bitwise against the package's own outputs (--expected,
runtime parity), under the recorded tolerance against eager's (--eager-reference), or,
for identity models, against the inputs."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, List, NoReturn, Optional

import typer

from ..errors import EXIT_MISMATCH, InputError, VerificationError
from .common import (
    AtolOption, BitwiseOption, FakeModuleOption, MaxUlpOption, RtolOption, console, exit_with, held_stderr,
    option, print_check, put_working_folder_on_path, run_without_teardown, tolerance_override, verdict,
)

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


@app.command(
    "run",
    short_help="Run a package, a bundle or an .onnx file from Python, and check its outputs.",
    help=(
        "Run an AOTI package (.pt2) or an ONNX file (.onnx, in onnxruntime; needs the ONNX extra) "
        "written by export_compile from Python and check its outputs. Two checks, each named in "
        "the output: runtime parity, bitwise against --expected FILE (the package's own outputs, "
        "e.g. the expected.pt of export_compile --save-reference: every runtime of one package "
        "must give the same bits); and compiled vs eager, against --eager-reference FILE (eager's "
        "outputs, eager.pt) under the tolerance the package recorded at export. Without either, "
        "packages that declare an identity model are checked bitwise against their inputs; "
        "other packages just run. --bitwise, --max-ulp or --rtol/--atol override the rule of "
        "the eager check if given, else of the other one.\n\n"
        "Op libraries are loaded in order before the package: the positional ones, then "
        "each --op-lib. Inputs are checked against the shapes, dtype and device the package "
        "records before anything runs.\n\n"
        "MODEL_PATH may be a deploy bundle (a folder written by aoti-deploy bundle or export_compile "
        "--bundle): its op libraries are loaded from it, in the order the package records them, and "
        "no others may be given. With a trusted key (--trusted-key PUB.pem, else "
        "$AOTI_DEPLOY_TRUSTED_KEY) only a signed bundle runs: it is copied into a private folder, "
        "the copy is verified (signature, key, every file's digest, nothing missing or extra) before "
        "anything native loads, and only the copy is loaded. --require-signature refuses unsigned "
        "input even without a key.\n\n"
        "Exit codes: 0 PASSED (or DONE when nothing is compared), 1 outputs differ "
        "(beyond the tolerance), 2 usage, load, input or signature error."
    )
)
def run_inference(
    model_path: Annotated[
        Path, typer.Argument(help="The .pt2 package, a bundle folder, or an .onnx file.")
    ] = Path("artifacts/model.pt2"),
    op_lib_paths: Annotated[
        Optional[List[Path]],
        typer.Argument(
            help="Op libraries to load, in order. Default, for packages that need it: "
            "libidentity_conv_ops.so from $AOTI_DEPLOY_OPS_LIB, else from $AOTI_DEPLOY_BUILD_DIR or "
            "this checkout's build/.",
            show_default=False,
        ),
    ] = None,
    op_lib: Annotated[
        Optional[List[Path]], typer.Option(help="Another op library to load (repeatable), after the positional ones.")
    ] = None,
    fake_module: FakeModuleOption = None,
    expected: Annotated[
        Optional[Path],
        typer.Option(help="Runtime parity: compare the outputs bit-for-bit with this tensor file, e.g. export_compile's expected.pt."),
    ] = None,
    eager_reference: Annotated[
        Optional[Path],
        typer.Option(
            help="Compiled vs eager: compare the outputs with this tensor file of eager's outputs (export_compile's "
            "eager.pt) under the package's recorded tolerance (torch.testing's defaults if it records none)."
        ),
    ] = None,
    bitwise: BitwiseOption = False,
    max_ulp: MaxUlpOption = None,
    rtol: RtolOption = None,
    atol: AtolOption = None,
    inputs: Annotated[
        Optional[Path],
        typer.Option(
            help="Read inputs from this file: a list of tensors saved with torch.save, or for a package that names "
            "its inputs a dict of name -> tensor (torch.save({'input_ids': t, ...}, path))."
        ),
    ] = None,
    outputs: Annotated[Optional[Path], typer.Option(
        help="Write the outputs to this file: a dict of name -> tensor for a package whose model returns its "
        "outputs by name (a dict), in the package's order; else a list of tensors.")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random input used without --inputs.")] = 0,
    input_shape: Annotated[
        Optional[List[str]],
        typer.Option(
            help="Shape of the random input, e.g. 4,3,16,16 (repeat once per input, in order), for a dynamic "
            "package: any shape in its ranges. Default: the shapes it was verified at. Not with --inputs.",
        ),
    ] = None,
    trusted_key: Annotated[Optional[Path], option(
        "Run only bundles signed by this key (a PEM EC public key, e.g. from openssl ec -in key.pem "
        "-pubout -out key.pub), verified before anything loads. Default: $AOTI_DEPLOY_TRUSTED_KEY.",
        show_default=False,
    )] = None,
    require_signature: Annotated[
        bool,
        typer.Option("--require-signature", help="Refuse unsigned bundles and bare packages.", show_default=False),
    ] = False,
) -> None:
    put_working_folder_on_path()
    # The stages import torch: here, not at module level, so --help starts without it.
    try:
        import torch

        from ..package.spec import tensor_label, tensor_names
        from ..runtime.aoti import scalar_output_lines, to_package_device
        from ..runtime.preflight import thread_count_note
        from ..runtime.random_inputs import make_random_inputs
        from ..runtime.session import open_session
        from ..runtime.tensor_files import load_tensors, save_tensors
        from ..runtime.trust import trust_policy
        from ..runtime.validation import validate_inputs
        from ..verify.tolerance import compare_outputs, compared_labels, plan_checks
        from .parsing import parse_shape
    except Exception as error:  # a broken torch install: exit 2 with the reason, not 1 (a mismatch)
        exit_with(error)

    # Removes a verified bundle's private copy on the way out, whatever the exit.
    with ExitStack() as cleanup:
        try:
            override = tolerance_override(bitwise, max_ulp, rtol, atol)
            if inputs is not None and input_shape:
                raise InputError(
                    "--input-shape sets the shape of the random inputs, which --inputs replaces; pass one or the other."
                )
            shapes = [parse_shape(text) for text in input_shape] if input_shape else None
            # The trust policy before anything native loads (under a trusted key, what
            # loads is the verified private copy), then the libraries, then the model.
            # Closed on the way out: the loader's extracted files go before main() ends
            # the process.
            session = cleanup.enter_context(open_session(
                model_path, op_libraries=[*(op_lib_paths or []), *(op_lib or [])], fake_modules=list(fake_module or []),
                policy=trust_policy(trusted_key, require_signature),
            ))
            if session.opened.status:
                console.print(session.opened.status)
            spec, package = session.spec, session.model
            for library in session.libraries:
                console.print(f"loaded op library {library}")
            if session.onnx:
                console.print(f"runtime: onnxruntime (CPU), {spec.onnx_mode} ONNX file")
            if inputs is None:
                tensors = make_random_inputs(spec, seed, shapes)
                console.print(f"input: random (seed {seed})")
            else:
                tensors = to_package_device(load_tensors(inputs, tensor_names(spec.inputs), "input"), spec)
                console.print(f"input: {inputs}")
            tensors = validate_inputs(tensors, spec)
            # The references before the run, as aoti_runner: a bad file is refused before
            # any output is written.
            output_names = tensor_names(spec.outputs)
            expected_tensors = None if expected is None else load_tensors(expected, output_names, "output")
            eager_tensors = None if eager_reference is None else load_tensors(eager_reference, output_names, "output")
            for i, tensor in enumerate(tensors):  # the same lines as aoti_runner's
                label = tensor_label("input", i, spec.inputs)
                console.print(f"{label}: {list(tensor.shape)} {spec.inputs[i].dtype} on {spec.device}")
            if note := thread_count_note(spec.intra_op_threads, torch.get_num_threads()):
                console.print(f"note: {note}")
            with held_stderr():
                results = package.run(tensors)
            console.print(f"ran {model_path}: {len(results)} output(s)")
            for line in scalar_output_lines(results, spec):
                console.print(line)
            if outputs is not None:
                save_tensors(outputs, results, spec.named_outputs(len(results)))
                console.print(f"wrote outputs to {outputs}")
            checks = plan_checks(
                expected=expected_tensors,
                eager=eager_tensors,
                inputs=tensors,
                is_identity=spec.is_identity,
                recorded=spec.eager_check,
                override=override,
            )
        except Exception as error:  # typed errors keep their code; anything else exits 2
            exit_with(error)

    if not checks:
        console.print(
            "verify: skipped (the package does not declare an identity model; pass --expected FILE or "
            "--eager-reference FILE)\nDONE"
        )
        return
    passed = True
    for check in checks:
        try:
            labels = compared_labels(spec, check.reference_name, len(results))
            comparisons = compare_outputs(results, check.references, check.tolerance,
                                          lambda i: f"verify: {labels[i]}", reference_name=check.reference_name)
        except VerificationError as error:  # the counts differ: aoti_runner's words
            console.print(f"{check.name}: {error}")
            passed = False
            continue
        except Exception as error:  # e.g. tensors of a width with no integer twin: exit 2, not 1
            exit_with(error)
        passed = print_check(check.name, comparisons) and passed
    console.print(verdict(passed))
    if not passed:
        raise typer.Exit(EXIT_MISMATCH)


def main() -> NoReturn:
    """The console script: the command, then the process ends without Python's
    teardown (see ``run_without_teardown``). In-process callers (tests) use ``app``."""
    run_without_teardown(app)
