"""int8 packages (``quantize="int8"`` or ``"int8-dynamic"``), through torchao's PT2E
flow: the exported graph is annotated by ``X86InductorQuantizer``, observed on the
calibration calls (static), converted, and exported again. Inductor then lowers each
quantized convolution and linear to oneDNN's int8 kernels (VNNI, AMX where the CPU
has them), but only under ``freezing``: without it every one silently runs in fp32
(pytorch/ao#4566). So the compiled code is read back, and a package whose int8
kernels fall short of the quantized graph's is refused, naming what fell back.

The package is checked against the converted graph run in eager (the quantized eager
reference); its drift from the fp32 model on the calibration calls is recorded
(spec ``quantization``) and shown by ``inspect``."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ..errors import CompileError, ExportError, InputError
from ..models.call import CallInputs
from ..models.user import flatten_outputs

_CONVS = {"aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.convolution.default"}
_LINEARS = {"aten.linear.default", "aten.addmm.default", "aten.mm.default"}
_MATMULS = {"aten.matmul.default", "aten.bmm.default", "aten.baddbmm.default"}
_DEQUANTIZE = re.compile(r"quantized_decomposed\.dequantize_per_(channel|tensor)")
# Calls in the generated wrapper: oneDNN's int8 kernels (each quantized op must have
# one), and the fp32 convolutions and GEMMs (counted for the record).
_INT8_CONV = re.compile(r"\baoti_torch_cpu__qconv\w*\(")
_INT8_LINEAR = re.compile(r"\baoti_torch_cpu__qlinear\w*\(")
_FP32_HEAVY = re.compile(
    r"\baoti_torch_cpu_(?:mkldnn__convolution\w*|convolution|_linear_pointwise\w*|mkl_linear|addmm_out|mm_out"
    r"|bmm_out|baddbmm_out|_addmm_activation)\("
)


def require_torchao() -> None:
    """Raise InputError when torchao (the quant extra) is missing."""
    try:
        with _quiet_import():
            import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401
    except ImportError as error:
        raise InputError(
            f"quantize needs torchao, which did not import ({error}); install the quant extra: "
            "pip install -e '.[quant]'"
        ) from None


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    """torchao prints a line for each of its CUDA-only extensions that cannot load on
    a CPU build of torch; they play no part here."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def calibration_calls(calibration: Any, example: CallInputs) -> list[CallInputs]:
    """The calibration as calls like the example's: each item the model's positional
    args (a tuple, or one tensor), or a dict of keyword args for a model called with
    keywords only."""
    if calibration is None:  # its form (a list or tuple) is ExportOptions.validate's to check
        return []
    calls = []
    for number, item in enumerate(calibration):
        if isinstance(item, dict):
            call = CallInputs.of((), item)
        else:
            call = CallInputs.of(item if isinstance(item, (tuple, list)) else (item,), None)
        if len(call.tensors()) != len(example.tensors()):
            raise InputError(
                f"calibration[{number}] holds {len(call.tensors())} tensor(s), but the example call has "
                f"{len(example.tensors())}; give each calibration call as the example's args"
            )
        calls.append(call)
    return calls


def quantize_module(program: torch.export.ExportedProgram, mode: str, calls: list[CallInputs]) -> torch.nn.Module:
    """The exported ``program`` quantized by X86InductorQuantizer: observed on
    ``calls`` (at least one: the weights' observers need a run, even for dynamic
    quantization) and converted (the quantized eager reference)."""
    with _quiet_import():
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    quantizer = x86.X86InductorQuantizer()
    if mode == "int8-dynamic":
        # Inductor has int8 kernels with per-call activation scales for linears only:
        # a dynamically quantized convolution would run in fp32.
        quantizer.set_module_type_qconfig(torch.nn.Linear,
                                          x86.get_default_x86_inductor_quantization_config(is_dynamic=True))
    else:
        quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    with torch.no_grad():
        prepared = prepare_pt2e(program.module(), quantizer)
        for number, call in enumerate(calls):
            try:
                call.call(prepared)
            except Exception as error:  # a shape the exported graph does not take
                shapes = ", ".join(str(list(t.shape)) for t in call.tensors())
                raise InputError(
                    f"calibration[{number}] (shapes {shapes}) does not run through the exported model: "
                    f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__}. A "
                    "calibration call must fit the package's shapes: the example's, but in its dynamic dims"
                ) from None
        return convert_pt2e(prepared)


def quantized_counts(graph: torch.fx.Graph) -> dict[str, int]:
    """Convolutions and linears of the converted graph whose weight is quantized, and
    the fp32 convolutions, linears and matmuls left (which may run fp32 kernels)."""
    counts = {"convolutions": 0, "linears": 0, "fp32_heavy": 0}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target)
        if target not in _CONVS | _LINEARS | _MATMULS:
            continue
        weight = node.args[1] if target not in {"aten.addmm.default"} else node.args[2]
        quantized = (isinstance(weight, torch.fx.Node) and weight.op == "call_function"
                     and _DEQUANTIZE.search(str(weight.target)) is not None)
        if quantized and target in _CONVS:
            counts["convolutions"] += 1
        elif quantized and target not in _MATMULS:
            counts["linears"] += 1
        else:
            counts["fp32_heavy"] += 1
    return counts


def drift(fp32: torch.nn.Module, quantized: torch.nn.Module, calls: list[CallInputs]) -> dict[str, Any]:
    """How far the low-precision model is from the fp32 one on ``calls``: the largest
    absolute difference of any floating output (where both are finite), and for the
    first floating output with classes in its last dim, the share of rows whose top-1
    agrees.

    Raises:
        ExportError: an output finite in one model and not in the other (or NaN
            against inf), where no tolerance can hold the two together.
    """
    max_abs, agree, rows = 0.0, 0, 0
    with torch.no_grad():
        for number, call in enumerate(calls):
            pairs = zip(flatten_outputs(call.call(fp32)), flatten_outputs(call.call(quantized)))
            first = True
            for index, (ref, out) in enumerate(pairs):
                if not (isinstance(ref, torch.Tensor) and ref.is_floating_point()):
                    continue
                ref, out = ref.double(), out.double()
                finite = torch.isfinite(ref)
                same_special = (ref == out) | (torch.isnan(ref) & torch.isnan(out))
                if not bool((finite == torch.isfinite(out)).all() and (finite | same_special).all()):
                    raise ExportError(
                        f"in lower precision, output {index} of call {number} becomes infinite or NaN where the "
                        "fp32 model's is not (or the other way round), so no tolerance can check the package "
                        "against it: keep this model in fp32, or quantize a model that stays finite"
                    )
                if bool(finite.any()):
                    max_abs = max(max_abs, float((ref[finite] - out[finite]).abs().max()))
                if first and ref.dim() >= 1 and ref.shape[-1] >= 2:
                    agree += int((ref.argmax(-1) == out.argmax(-1)).sum())
                    rows += ref.numel() // ref.shape[-1]
                first = False
    return {"max_abs": max_abs, "top1_agreement": agree / rows if rows else None}


def compiled_int8_kernels(package_path: str | Path) -> dict[str, int]:
    """Calls of oneDNN's int8 convolutions and GEMMs, and of fp32 ones, in the
    package's generated wrapper code."""
    with zipfile.ZipFile(package_path) as archive:
        source = "\n".join(archive.read(name).decode("utf-8", "replace") for name in archive.namelist()
                           if name.endswith(".wrapper.cpp"))
    return {"convolutions": len(_INT8_CONV.findall(source)), "linears": len(_INT8_LINEAR.findall(source)),
            "fp32_heavy": len(_FP32_HEAVY.findall(source))}


def check_int8_kernels(package_path: str | Path, record: dict[str, Any], configs: dict[str, Any]) -> dict[str, Any]:
    """Refuse a package whose compiled code runs a quantized convolution or linear
    other than as oneDNN's int8 kernel (an fp32 kernel on dequantized weights, or
    Inductor's own loop); return the record with what the compiled code runs."""
    found = compiled_int8_kernels(package_path)
    problems = [f"{record[kind] - found[kind]} of {record[kind]} quantized {label} compiled without an int8 kernel"
                for kind, label in (("convolutions", "convolution(s)"), ("linears", "linear(s)"))
                if found[kind] < record[kind]]
    if problems:
        hint = ("Inductor lowers quantized ops to int8 kernels only with freezing on (the toolkit's default), "
                "and this compile ran without it: drop freezing=False or --no-optimize" if not configs.get("freezing")
                else "Inductor did not match these ops to its int8 patterns (it computes some small or shared "
                "linears in its own loops, from dequantized weights): export this model in fp32 or bf16")
        raise CompileError(
            "the int8 package would silently run in fp32: " + "; ".join(problems) + f" ({found['convolutions']} "
            f"int8 convolution(s) and {found['linears']} int8 GEMM(s) in the compiled code). {hint}"
        )
    return {**record, "int8_convolutions": found["convolutions"], "int8_linears": found["linears"]}
