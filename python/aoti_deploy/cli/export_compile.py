"""export_compile: export a model (the built-in IdentityModel, or a user's own with
--model) with torch.export, compile it with AOTInductor into a .pt2 package, and
verify the package against eager: bitwise for the IdentityModel, under a tolerance
for other models (torch.testing's by default), recorded in the package."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from collections.abc import Iterable
from typing import Annotated, Any, List, Optional

import torch
import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..api import ONNX_MODES, ONNX_STAGES, PRECISIONS, QUANTIZE_MODES, STAGES, TARGETS, BuildResult, ExportOptions, FactorySource, IdentitySource, Package, export
from ..errors import EXIT_MISMATCH, AotiDeployError, VerificationError
from ..models.example import DEFAULT_RANGES
from ..models.identity import MODEL_VARIANTS
from ..package.dtypes import DTYPES, INPUT_DTYPES
from ..package.host import CPU_TARGET_NAMES, CPU_TARGETS
from ..runtime.tensor_files import REFERENCE_EAGER, REFERENCE_FILES, REFERENCE_INPUTS, REFERENCE_OUTPUTS, read_calibration
from ..verify.tolerance import FAILED, list_verdict, verdict_line
from .parsing import parse_dynamic_dim, parse_inductor_configs, parse_input_values, parse_model_args, parse_shape
from .common import (
    AtolOption, BitwiseOption, FakeModuleOption, MaxUlpOption, RtolOption, console, exit_with, option,
    put_working_folder_on_path, step_progress, tolerance_override,
)

app = typer.Typer(add_completion=False, rich_markup_mode="rich")


def _choices(name: str, values: Iterable[str]) -> Any:
    """A str Enum of ``values`` for typer (a member per value, ``-`` read as ``_``)."""
    return Enum(name, {value.replace("-", "_"): value for value in values}, type=str)


# Floating dtypes for the model; the integer and bool ones for a --model's inputs only.
DType = _choices("DType", [*DTYPES, *INPUT_DTYPES])
CpuTargetName = _choices("CpuTargetName", CPU_TARGET_NAMES)
Variant = _choices("Variant", MODEL_VARIANTS)
Device = _choices("Device", ("cpu", "cuda"))
QuantizeMode = _choices("QuantizeMode", QUANTIZE_MODES)
Precision = _choices("Precision", PRECISIONS)
Format = _choices("Format", TARGETS)
OnnxMode = _choices("OnnxMode", ONNX_MODES)


# export_compile exports for inference; the summary says so, as no option changes it.
EVAL_MODE_NOTE = "eval (model.eval() before export: dropout off, batch norm on its running statistics)"

DEFAULT_OUTPUTS = {Format.pt2: Path("artifacts/model.pt2"), Format.onnx: Path("artifacts/model.onnx")}


def _parse_range(flag: str, value: str) -> tuple[int, int]:
    """"1:64" -> (1, 64); a typer.BadParameter otherwise."""
    low, sep, high = value.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise typer.BadParameter(f"expected MIN:MAX with two integers, e.g. 1:64, got {value!r}", param_hint=flag)


def _check_range(param: typer.CallbackParam, value: str) -> str:
    _parse_range("--" + (param.name or "").replace("_", "-"), value)
    return value


MODEL_PANEL = "Your own model (--model)"
BUNDLE_PANEL = escape("Deploy bundle (--sign-key needs pip install -e '.[sign]')")
# Help text is rich markup: square brackets are escaped, or rich takes them for tags and drops them.
ONNX_PANEL = escape("ONNX target (export_compile onnx; needs pip install -e '.[onnx]')")
IDENTITY_PANEL = "Built-in IdentityModel (the default)"


@app.command(
    "export",
    short_help="Export a model, compile it with AOTInductor into a .pt2 package, and check it against eager.",
    help=(
        "Export a model with torch.export, compile it with AOTInductor into a .pt2 package, "
        "and check the package's outputs against eager's. Compiled code may round differently "
        "from eager (Inductor reorders reductions, fuses multiply-adds, picks other conv "
        "algorithms), so the check uses torch.testing.assert_close's rtol/atol for each output "
        "dtype, unless --rtol/--atol, --max-ulp or --bitwise say otherwise. The IdentityModel is "
        "checked bitwise: identity is its contract. The rule is recorded in the package, and the "
        "runners' --eager-reference applies it. The model is exported in eval mode (model.eval(): "
        "dropout off, batch norm on its running statistics); packages are for inference.\n\n"
        "Without --model it builds the four-layer IdentityModel (conv, torchbind class, custom "
        "op, conv). With --model package.module:factory it deploys your own module: load your op "
        "libraries with --op-lib (repeatable), give example input shapes with --input-shape "
        "(or let the factory return (module, example_inputs)), and save the example inputs, "
        "the package's outputs and eager's with --save-reference for the runners' --inputs, "
        "--expected (bitwise runtime parity) and --eager-reference (the recorded tolerance).\n\n"
        "A graph that calls an op only Python can run (torch.library.custom_op) is refused "
        "before compiling, since the C++ runtime has no Python; --allow-python-ops writes a "
        "package for the Python runtime only.\n\n"
        "export_compile onnx writes an ONNX file instead (default artifacts/model.onnx) and "
        "checks it in onnxruntime against eager, under the same rule as a package. --onnx-mode portable (the default) translates "
        "each custom op and torchbind method to standard ONNX ops, so any ONNX runtime runs "
        "the file; custom-domain writes them as nodes of their own domain (my_ops), with the "
        "class state as attributes, which only a runtime given their kernels runs (run_inference "
        "gives onnxruntime the op library's).\n\n"
        "Exit codes: 0 package written and verified, 1 package outputs differ from eager "
        "beyond the tolerance (the package is not written, and one already at --output is kept), "
        "2 usage, load, export or compile error."
    )
)
def export_compile(
    target: Annotated[
        Format,
        typer.Argument(
            help="What to write: pt2 (an AOTInductor package for the Python and C++ runners) or "
            "onnx (an ONNX file for onnxruntime).",
            case_sensitive=False,
        ),
    ] = Format.pt2,
    onnx_mode: Annotated[OnnxMode, option(
        panel=ONNX_PANEL, help="portable: custom ops become standard ONNX ops (their registered translations). "
        "custom-domain: custom ops become nodes of their namespace's ONNX domain."
    )] = OnnxMode.portable,
    model: Annotated[Optional[str], option(
        panel=MODEL_PANEL, help="Your model's factory, package.module:function, imported from the current folder "
        "or the environment. It returns an nn.Module, or (module, example_inputs)."
    )] = None,
    model_arg: Annotated[Optional[List[str]], option(
        panel=MODEL_PANEL, help="KEY=VALUE keyword argument for the factory (repeatable); VALUE is read as a "
        "Python literal when it is one, else as text."
    )] = None,
    input_shape: Annotated[Optional[List[str]], option(
        panel=MODEL_PANEL, help="Shape of one example input, e.g. 1,3,224,224 (repeat once per forward argument, "
        "in order). Inputs are seeded random of --dtype. Not needed if the factory returns inputs."
    )] = None,
    dynamic_dim: Annotated[Optional[List[str]], option(
        panel=MODEL_PANEL, help="A dim that may vary at run time: INPUT.DIM=MIN:MAX, e.g. 0.0=1:64 (input 0, dim 0); "
        "MIN: with no MAX (0.0=1:) has no upper bound. "
        "Positions that must share one size go together: 0.0,1.0=1:64. Repeatable."
    )] = None,
    input_values: Annotated[Optional[List[str]], option(
        panel=MODEL_PANEL, help="The values an integer input may hold: INPUT=MIN:MAX, e.g. 0=0:999 (input 0, ids 0 to 999). "
        "Export records the range of an input that indexes a tensor itself; give it where an id is "
        "computed before it indexes. The runners refuse values outside it. Repeatable."
    )] = None,
    fake_module: FakeModuleOption = None,
    inductor_config: Annotated[
        Optional[List[str]],
        typer.Option(
            help="An Inductor setting to compile with: KEY=VALUE, e.g. freezing=True or max_autotune=True "
            "(torch._inductor.config's names). Recorded in the package, shown by inspect, and the package "
            "is checked against eager as always. Repeatable.",
        ),
    ] = None,
    save_reference: Annotated[Optional[Path], option(
        panel=MODEL_PANEL, help=f"Write the example inputs ({REFERENCE_INPUTS}), the package's outputs for them "
        f"({REFERENCE_OUTPUTS}) and eager's ({REFERENCE_EAGER}) to this folder, for the runners' --inputs, "
        "--expected and --eager-reference. The outputs are written as the runners' --outputs: a dict by name "
        "for a model that returns a dict, else a list."
    )] = None,
    allow_python_ops: Annotated[bool, option(
        panel=MODEL_PANEL, help="Write the package even if the graph calls ops only Python can run. It is marked "
        "Python-only, and the C++ runner refuses it."
    )] = False,
    bitwise: BitwiseOption = False,
    max_ulp: MaxUlpOption = None,
    rtol: RtolOption = None,
    atol: AtolOption = None,
    channels: Annotated[int, option("Channels of the input and of every layer.", min=1, panel=IDENTITY_PANEL)] = 3,
    batch: Annotated[int, option("Batch size of the example input.", min=1, panel=IDENTITY_PANEL)] = 1,
    height: Annotated[int, option("Height of the example input.", min=1, panel=IDENTITY_PANEL)] = 224,
    width: Annotated[int, option("Width of the example input.", min=1, panel=IDENTITY_PANEL)] = 224,
    dtype: Annotated[
        DType,
        typer.Option(
            help="Floating dtype of the model and its inputs. With --model and --input-shape, an integer or bool "
            "dtype is the dtype of the seeded random inputs alone (the model keeps its own): values 0 and 1, or "
            "those --input-values gives.",
        ),
    ] = DType.float32,
    device: Annotated[
        Device, typer.Option(help="Device to compile for. cuda needs a CUDA build of torch and a GPU.")
    ] = Device.cpu,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random example input.")] = 0,
    output: Annotated[
        Optional[Path],
        typer.Option(
            "--output", "-o", help=escape("Where to write the package.  [default: artifacts/model.pt2, or artifacts/model.onnx]"),
            show_default=False,
        ),
    ] = None,
    op_lib: Annotated[
        Optional[List[Path]],
        typer.Option(
            help="An op library to load before export (repeatable, loaded in order). Default, for "
            "the IdentityModel: libidentity_conv_ops.so from $AOTI_DEPLOY_OPS_LIB, else from "
            "$AOTI_DEPLOY_BUILD_DIR or this checkout's build/.",
        ),
    ] = None,
    dynamic: Annotated[str, option(
        panel=IDENTITY_PANEL, help="Comma-separated dims that may vary at run time: any of batch, height, width. "
        "The package then accepts any size in the dim's range."
    )] = "",
    batch_range: Annotated[
        str,
        typer.Option(help="MIN:MAX of a dynamic batch.", callback=_check_range, rich_help_panel=IDENTITY_PANEL),
    ] = "{}:{}".format(*DEFAULT_RANGES["batch"]),
    height_range: Annotated[
        str,
        typer.Option(help="MIN:MAX of a dynamic height.", callback=_check_range, rich_help_panel=IDENTITY_PANEL),
    ] = "{}:{}".format(*DEFAULT_RANGES["height"]),
    width_range: Annotated[
        str,
        typer.Option(help="MIN:MAX of a dynamic width.", callback=_check_range, rich_help_panel=IDENTITY_PANEL),
    ] = "{}:{}".format(*DEFAULT_RANGES["width"]),
    variant: Annotated[Variant, option(
        panel=IDENTITY_PANEL, help="Layer 3 of the model: functional (identity_conv_op returns a new tensor) or out "
        "(the mutable identity_conv_op_out writes a preallocated one)."
    )] = Variant.functional,
    optimize: Annotated[
        bool,
        typer.Option(
            help="Export-time graph optimizations that keep eager's bits: pointwise (1x1 depthwise, "
            "no bias, unstrided, unpadded) convs become one fused multiply, each after a bit-exactness "
            "probe with special values. On the CPU also the speed settings that measured fastest "
            "(freezing; squeeze-and-excitation's one-pixel convs as fused sums; symmetric zero pads as "
            "the convs' own padding; a conv's SiLU in Inductor's loops, not oneDNN's swish), each "
            "dropped for a model whose compile or check it breaks. "
            "--no-optimize compiles the graph as exported, with Inductor's own defaults.",
        ),
    ] = True,
    tune: Annotated[bool, typer.Option(
        "--tune",
        help="Compile the model under each candidate set of Inductor settings, check each against eager, "
        "then time the verified ones in the C++ runner on the example inputs (three interleaved rounds) "
        "and keep the fastest. The "
        "package records every candidate's time (inspect shows them). CPU .pt2 packages only.",
    )] = False,
    tune_budget: Annotated[float, typer.Option(
        min=1, help="Seconds --tune may spend compiling; a candidate not started by then is not tried. "
        "The timing after the compiles takes about 2 s per verified candidate.",
    )] = 600.0,
    threads: Annotated[Optional[int], typer.Option(
        min=1, max=1024, show_default=False,
        help="The intra-op thread count the package will run at (CPU .pt2 packages): the compile, its checks and "
        "--tune's timings run at it, and the package records it. oneDNN lays convolution weights out for the "
        "compile's count and at another count may lay some out again on every call (a ResNet-50 ran 2.3x "
        "slower). Default: this process's count (all cores, or OMP_NUM_THREADS).",
    )] = None,
    quantize: Annotated[Optional[QuantizeMode], typer.Option(
        help="Make an int8 package through torchao's PT2E flow (the quant extra): int8 quantizes weights and "
        "activations with scales from --calibration (convolutional models); int8-dynamic quantizes the "
        "weights, and the activations per call (linear-heavy models such as transformers). The package is "
        "checked against the quantized model in eager, records its drift from fp32 (inspect shows it), and is "
        "refused if any quantized convolution or linear would run in fp32.", case_sensitive=False,
        show_default=False,
    )] = None,
    precision: Annotated[Precision, typer.Option(
        help="bf16: the model's weights and compute in bfloat16, its inputs and outputs float32 as before; "
        "only on a host with AVX512-BF16 or AMX-BF16, which the package then requires. Checked against the bf16 "
        "model in eager; the package records its drift from fp32.", case_sensitive=False,
    )] = "fp32",  # type: ignore[assignment]
    calibration: Annotated[Optional[Path], typer.Option(
        help="A tensor file of calibration calls for --quantize: torch.save([batch, ...], FILE), each item the "
        "model's input tensor, a list of its tensors, or a dict of name -> tensor. A few typical batches.",
        show_default=False,
    )] = None,
    cpu_target: Annotated[
        CpuTargetName,
        typer.Option(
            help="The CPU the compiled code may assume. native (-march=native) uses every feature of this "
            "host, and the runners refuse hosts that lack any of them. A psABI level runs on every x86-64 CPU "
            "that has it: " + "; ".join(f"{t.name}: {t.summary}" for t in CPU_TARGETS.values()) + ". The "
            "package records the level's flags, and the runners check only those. This host must have them, "
            "since the package is verified by running it here.",
            case_sensitive=False,
        ),
    ] = CpuTargetName.native,
    force: Annotated[
        bool,
        typer.Option(
            help="Rebuild even if the package at --output was built from the same inputs. Without it, "
            "such a package is reused (\"cached\"): the key covers the model's source and state, the op "
            "libraries' content, shapes, dtype, device, options and the torch version.",
        ),
    ] = False,
    show_graph: Annotated[bool, typer.Option(help="Print the exported graph.")] = True,
    bundle: Annotated[Optional[Path], option(
        "Also write a deploy bundle to this folder once the package is written and verified: "
        "model.pt2 and the op libraries it records (see aoti-deploy bundle).",
        panel=BUNDLE_PANEL, show_default=False,
    )] = None,
    sign_key: Annotated[Optional[Path], option(
        "Sign the --bundle with this PEM EC private key (P-256, P-384 or P-521); make one with "
        "openssl ecparam -name prime256v1 -genkey -noout -out key.pem, and its public key for the "
        "runners' --trusted-key with openssl ec -in key.pem -pubout -out key.pub.",
        panel=BUNDLE_PANEL, show_default=False,
    )] = None,
) -> None:
    put_working_folder_on_path()
    try:
        # Refused before the build: a bundle option that cannot work would waste it.
        if sign_key is not None and bundle is None:
            raise AotiDeployError(
                "--sign-key signs the bundle that --bundle DIR writes; pass --bundle DIR too", kind="usage"
            )
        if bundle is not None and target is Format.onnx:
            raise AotiDeployError(
                "--bundle writes a bundle of an AOTI package (.pt2); export_compile onnx writes an ONNX file",
                kind="usage",
            )
        if sign_key is not None:
            from ..package.signing import check_private_key

            check_private_key(sign_key)
    except Exception as error:
        exit_with(error)
    if device is Device.cuda and not torch.cuda.is_available():
        exit_with(
            AotiDeployError(
                "--device cuda was requested, but torch.cuda.is_available() is false "
                f"(torch {torch.__version__}). Use --device cpu, or a machine with a GPU and a "
                "CUDA build of torch."
            )
        )
    try:
        if model is None:
            source: IdentitySource | FactorySource = IdentitySource(
                channels=channels, batch=batch, height=height, width=width, dtype=dtype.value, seed=seed,
                dynamic=tuple(name.strip() for name in dynamic.split(",") if name.strip()),
                ranges={
                    "batch": _parse_range("--batch-range", batch_range),
                    "height": _parse_range("--height-range", height_range),
                    "width": _parse_range("--width-range", width_range),
                },
                variant=variant.value,
            )
        else:
            source = FactorySource(
                model, model_args=parse_model_args(model_arg or []),
                input_shapes=[parse_shape(text) for text in input_shape or []],
                dynamic_dims=[parse_dynamic_dim(text) for text in dynamic_dim or []],
                dtype=dtype.value, seed=seed, input_values=parse_input_values(input_values or []),
            )
        _check_model_flags(source, dynamic, variant, input_values, input_shape, dynamic_dim, model_arg)
        options = ExportOptions(
            target=target.value, onnx_mode=onnx_mode.value, device=device.value, op_libraries=list(op_lib or []),
            fake_modules=list(fake_module or []), cpu_target=cpu_target.value, seed=seed,
            tolerance=tolerance_override(bitwise, max_ulp, rtol, atol),
            input_values=dict(getattr(source, "input_values", {})), allow_python_ops=allow_python_ops,
            inductor_configs=parse_inductor_configs(inductor_config or []),
            optimize="tune" if tune else optimize, tune_budget=tune_budget, threads=threads, force=force, references=save_reference,
            quantize=quantize.value if quantize else None, precision=getattr(precision, "value", precision),
            calibration=None if calibration is None else read_calibration(calibration),
        )
    except Exception as error:  # a bad --model-arg, --input-shape or --dynamic-dim
        exit_with(error)
    package: Package | None = None
    try:
        with step_progress(len(ONNX_STAGES if target is Format.onnx else STAGES)) as on_stage:
            package = export(source, options=options, package_path=output or DEFAULT_OUTPUTS[target],
                             on_stage=on_stage)
        result = package.result
    except VerificationError as error:  # the checks failed: the summary says where
        if getattr(error, "result", None) is None:
            exit_with(error, FLAGS)
        result = error.result  # type: ignore[attr-defined]
    except Exception as error:  # typed errors keep their code; anything else exits 2
        exit_with(error, FLAGS)
    assert result is not None
    bundle_rows: list[tuple[str, str]] = []
    if bundle is not None:
        if package is not None:
            try:
                bundle_rows = _write_bundle(package, bundle, sign_key)
            except Exception as error:  # the package stays written; the bundle is not
                exit_with(error)
        else:
            bundle_rows = [("bundle", f"{bundle}: not written, the checks failed")]

    if show_graph:
        # Plain lines, not a panel: a panel would crop the node targets.
        console.rule("exported graph")
        console.print(result.graph)
        console.rule()

    table = Table(title="export_compile summary")
    table.add_column("item")
    table.add_column("value")
    for name, seconds in result.timings.items():
        table.add_row(f"stage: {name}", f"{seconds:.2f} s")
    table.add_row("model", result.model_name)
    table.add_row("model mode", EVAL_MODE_NOTE)
    if target is Format.onnx:
        table.add_row("onnx mode", onnx_mode.value)
        table.add_row("onnx nodes", ", ".join(f"{domain}.{op}" for domain, op in result.onnx_nodes))
        table.add_row("class routes", ", ".join(result.onnx_routes) or "none")
    else:
        chosen = CPU_TARGETS.get(cpu_target.value)
        table.add_row("cpu target", f"{chosen.name}: {chosen.summary}" if chosen else "native: this host's CPU features")
        table.add_row(
            "compile cache",
            "cached: the package at --output was built from the same inputs (export, compile and verify "
            "skipped; checks below are from that build; --force rebuilds)"
            if result.cached
            else "cached: the same compiled code, verified again under the rule asked for (export and compile "
            "skipped; --force rebuilds)"
            if result.reverified
            else "built (key recorded in the package)",
        )
    for i, spec in enumerate(result.spec.inputs):
        table.add_row(f"input[{i}] spec", f"{spec.shape_str()} {spec.dtype} on {device.value}")
        if spec.values is not None:
            table.add_row(f"input[{i}] values", f"{spec.values.min}..{spec.values.max} ({spec.values.why})")
    table.add_row("optimizations", result.spec.optimizations)
    for row in result.spec.tuning:
        timed = f"p50 {row['p50_us']:.0f} µs (C++ runner)" if row["p50_us"] is not None else "not timed"
        table.add_row(f"tune: {row['name']}", f"{timed}; {row['result']}")
    table.add_row("custom ops", ", ".join(result.calls.ops))
    table.add_row("torchbind classes", ", ".join(result.calls.classes))
    if result.spec.python_only_ops:
        table.add_row("python-only ops", ", ".join(result.spec.python_only_ops) + " (C++ runner refuses this package)")
    table.add_row("op libraries loaded", ", ".join(str(path) for path in result.op_libraries) or "none given")
    table.add_row("op libraries recorded", ", ".join(result.spec.op_libraries) or "none")
    if result.written:
        table.add_row("package", str(result.package_path))
        size = result.package_path.stat().st_size
        table.add_row("package size", f"{size / 1e6:.2f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB")
    else:
        kept = "the package already there is untouched" if result.package_path.exists() else "nothing was written"
        table.add_row("package", f"{result.package_path}: not written, the checks failed ({kept})")
    for name, value in bundle_rows:
        table.add_row(name, value)
    table.add_row("eager check", _describe_rule(result))
    for label, comparison in result.checks:
        table.add_row(f"{label} ({comparison.rule})", str(comparison))
    if result.reference_dir is not None:
        table.add_row(
            "reference",
            ", ".join(str(result.reference_dir / name) for name in REFERENCE_FILES),
        )
    console.print(table)
    against = "onnxruntime" if target is Format.onnx else "package"
    comparisons = [comparison for _, comparison in result.checks]
    passed = list_verdict(comparisons) != FAILED
    console.print(Text(f"verify eager vs {against}: ").append(verdict_line(comparisons), style="bold green" if passed else "bold red"))
    if not passed:
        if result.failure_hint:
            console.print(Text(f"likely cause: {result.failure_hint}", style="red"))
        raise typer.Exit(EXIT_MISMATCH)


def _write_bundle(package: Package, dest: Path, sign_key: Path | None) -> list[tuple[str, str]]:
    """Write the bundle of the package just written; the summary's rows for it."""
    from ..package.bundle import SIGNATURE_NAME, file_digests

    written = package.bundle(dest, sign_key=sign_key)
    files = file_digests(written)
    rows = [("bundle", f"{written}: " + ", ".join(found.name for found in files))]
    if sign_key is None:
        rows.append(("bundle signature", "not signed (--sign-key KEY.pem signs it)"))
    else:
        from ..package.signature_file import read_signature

        signature = read_signature(written / SIGNATURE_NAME)
        rows.append((
            "bundle signature",
            f"{SIGNATURE_NAME}, {len(signature.files)} files signed with {sign_key} (key hint {signature.key_hint})",
        ))
    return rows


def _check_model_flags(source: IdentitySource | FactorySource, dynamic: str, variant: Variant,
                       input_values: list[str] | None, input_shape: list[str] | None,
                       dynamic_dim: list[str] | None, model_arg: list[str] | None) -> None:
    """Each model's own flags: --dynamic and --variant are the IdentityModel's,
    --input-shape, --dynamic-dim, --model-arg and --input-values a --model's."""
    if isinstance(source, FactorySource):
        if dynamic.strip() or variant is not Variant.functional:
            raise AotiDeployError(
                "--dynamic and --variant apply to the built-in IdentityModel; with --model, "
                "give dynamic dims with --dynamic-dim INPUT.DIM=MIN:MAX", kind="usage",
            )
        return
    if input_values:
        raise AotiDeployError("--input-values applies to a model given with --model; the IdentityModel takes no "
                              "integer input", kind="usage")
    if input_shape or dynamic_dim or model_arg:
        raise AotiDeployError(
            "--input-shape, --dynamic-dim and --model-arg apply to a model given with --model; "
            "the built-in IdentityModel takes --batch/--channels/--height/--width and --dynamic", kind="usage",
        )


# The API's words in an error, as this command's flags.
FLAGS = {
    "allow_python_ops=True": "--allow-python-ops",
    "allow_python_ops applies": "--allow-python-ops applies",
    "cpu_target applies": "--cpu-target applies",
    "inductor_configs apply": "--inductor-config applies",
    "package_path ": "--output ",
    "export with target='onnx'": "run export_compile onnx",
    "(device='cpu')": "(--device cpu)",
    "with op_libraries": "with --op-lib",
    "optimize='tune' tunes": "--tune tunes",
    "tune_budget must": "--tune-budget must",
    "threads sets": "--threads sets",
    "; leave threads out": "; leave --threads out",
    "pass calibration=[args, ...] (a few typical batches; --calibration FILE on the command line)":
        "pass --calibration FILE (torch.save([batch, ...], FILE): a few typical batches)",
    "or use quantize='int8-dynamic'": "or use --quantize int8-dynamic",
    "quantize='int8' sets": "--quantize int8 sets",
    "quantize makes": "--quantize makes",
    "precision='bf16'": "--precision bf16",
    "or with quantize='int8'": "or with --quantize int8",
}


def _describe_rule(result: BuildResult) -> str:
    """The rule, and whether the package records it (only a package that passed does)."""
    rule = result.tolerance.describe()
    if result.tolerance.is_default_close:
        rule += f" ({'; '.join(sorted({comparison.rule for _, comparison in result.checks}))})"
    return rule + (", recorded in the package" if result.written else "")


def main() -> None:
    app()
