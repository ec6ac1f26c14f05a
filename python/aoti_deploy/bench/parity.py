"""The same bits in every runtime: for each dtype, static and dynamic shapes, and
random and special-value inputs, compare eager, torch.compile, the package in
Python and the package in C++ bit-for-bit. Where the identity contract does not
hold, say which layer changes which values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import AotiDeployError
from ..models.identity import IdentityModel
from ..package.archive import read_package_spec
from ..package.dtypes import DTYPES
from ..compiler.options import ExportOptions
from ..compiler.pipeline import export_and_compile
from ..models.example import IdentitySource, seeded_input
from ..runtime.aoti import load_package
from ..verify.special_values import special_values
from ..runtime.cpp_runner import WROTE_OUTPUTS, CppRunner
from ..verify.bits import BitReport, bit_view, compare_bits

SHAPE_MODES = ("static", "dynamic")
INPUT_KINDS = ("random", "special")
IDENTITY_PAIR = "input vs eager"
RUNTIME_PAIRS = ("eager vs torch.compile", "eager vs AOTI-Python", "AOTI-Python vs AOTI-C++")
# The ONNX column: the portable ONNX file in onnxruntime (needs the ONNX extra).
ONNX_PAIR = "eager vs ONNX"
# dtypes the ONNX target cannot run, with a phrase of the error that says why:
# bfloat16 is refused at export (numpy, onnxruntime's input, has none), and
# onnxruntime's CPU provider has no float64 Conv kernel. Any other failure raises.
ONNX_UNSUPPORTED = {"bfloat16": "which the ONNX target does not support", "float64": "NOT_IMPLEMENTED"}

# Small shapes keep the matrix cheap; compile time does not depend on them. The
# dynamic package is compiled at STATIC_SHAPE and run at DYNAMIC_RUN_SHAPE.
STATIC_SHAPE = (2, 3, 8, 12)
DYNAMIC_RUN_SHAPE = (3, 3, 5, 7)
DYNAMIC_RANGES = {"batch": (1, 8), "height": (1, 64), "width": (1, 64)}


@dataclass(frozen=True)
class LayerChange:
    """One layer of the model that changed bits of its input."""

    layer: str
    is_custom: bool
    report: BitReport
    kinds: dict[str, int]

    def __str__(self) -> str:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in self.kinds.items())
        return f"{self.layer} changed {self.report.num_differ} values ({kinds})"


@dataclass
class CellResult:
    dtype: str
    shapes: str
    input_kind: str
    shape: tuple[int, ...]
    pairs: dict[str, BitReport]
    layer_changes: list[LayerChange] = field(default_factory=list)
    # Why the ONNX column has no result ("" when it has one, or was not asked for).
    onnx_skipped: str = ""

    @property
    def runtimes_agree(self) -> bool:
        return all(report.identical for pair, report in self.pairs.items() if pair != IDENTITY_PAIR)

    @property
    def identity_holds(self) -> bool:
        return self.pairs[IDENTITY_PAIR].identical

    @property
    def custom_layer_changed_bits(self) -> bool:
        return any(change.is_custom for change in self.layer_changes)


def classify_changes(before: torch.Tensor, after: torch.Tensor) -> dict[str, int]:
    """Name the kinds of value changes between two same-shape tensors."""
    differ = bit_view(before) != bit_view(after)
    b = before.detach().cpu().flatten()[differ].double()
    a = after.detach().cpu().flatten()[differ].double()
    tiny = torch.finfo(before.dtype).tiny
    kinds = {
        "-0.0 became +0.0": (b == 0) & torch.signbit(b) & (a == 0) & ~torch.signbit(a),
        "NaN payload or sign changed": b.isnan() & a.isnan(),
        "subnormal flushed to zero": (b != 0) & (b.abs() < tiny) & (a == 0),
    }
    counts: dict[str, int] = {}
    explained = torch.zeros_like(b, dtype=torch.bool)
    for kind, mask in kinds.items():
        if int(mask.sum()):
            counts[kind] = int(mask.sum())
        explained |= mask
    if int((~explained).sum()):
        counts["other"] = int((~explained).sum())
    return counts


def attribute_layers(model: IdentityModel, x: torch.Tensor) -> list[LayerChange]:
    """Run the model one layer at a time and report every layer whose output bits
    differ from its input bits."""
    changes = []
    with torch.no_grad():
        for name, layer, is_custom in model.named_layers():
            y = layer(x)
            report = compare_bits(y, x)
            if not report.identical:
                changes.append(LayerChange(name, is_custom, report, classify_changes(x, y)))
            x = y
    return changes


def run_cpp_runner(runner: Path, package: Path, op_lib: Path, x: torch.Tensor) -> torch.Tensor:
    """Run ``x`` through the C++ runner as a subprocess; return its output tensor.
    Exit 1 (the identity check failed) still returns the output, to compare here.

    Raises:
        PackageError: the runner failed for another reason.
    """
    return CppRunner(package, [op_lib], executable=runner).outputs([x], accept=WROTE_OUTPUTS, timeout=300)[0]


def run_matrix(
    work_dir: Path,
    runner: Path,
    op_lib: Path,
    dtypes: tuple[str, ...] = tuple(DTYPES),
    shape_modes: tuple[str, ...] = SHAPE_MODES,
    input_kinds: tuple[str, ...] = INPUT_KINDS,
    on_step: Callable[[str], None] | None = None,
    onnx: bool = False,
) -> list[CellResult]:
    """Compile one package per (dtype, shape mode) and compare every runtime on
    every input kind.

    Args:
        work_dir: where the packages and tensor files go.
        runner: the built aoti_runner.
        op_lib: the built op library (loaded in this process too).
        dtypes, shape_modes, input_kinds: the matrix's axes.
        on_step: called with a description before each compile and each cell.
        onnx: also export a portable ONNX file per (dtype, shape mode) and compare
            its output in onnxruntime with eager's (the ONNX extra must be installed).

    Returns:
        One CellResult per (dtype, shape mode, input kind).
    """
    for name, values, allowed in (("dtype", dtypes, DTYPES), ("shape mode", shape_modes, SHAPE_MODES),
                                  ("input kind", input_kinds, INPUT_KINDS)):
        unknown = [v for v in values if v not in allowed]
        if unknown:
            raise AotiDeployError(f"unknown {name} {', '.join(unknown)}; choose from {', '.join(allowed)}")
    work_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for dtype in dtypes:
        model = IdentityModel(STATIC_SHAPE[1]).to(DTYPES[dtype]).eval()
        for mode in shape_modes:
            if on_step:
                on_step(f"compile {dtype} {mode}")
            dynamic = mode == "dynamic"
            source = IdentitySource(
                batch=STATIC_SHAPE[0], channels=STATIC_SHAPE[1], height=STATIC_SHAPE[2], width=STATIC_SHAPE[3],
                dtype=dtype, dynamic=("batch", "height", "width") if dynamic else (), ranges=dict(DYNAMIC_RANGES),
            )
            output = work_dir / f"model_{dtype}_{mode}.pt2"
            package_path = export_and_compile(source, ExportOptions(op_libraries=[op_lib]), output).package_path
            package = load_package(package_path, read_package_spec(package_path))
            onnx_session, onnx_skipped = _onnx_session(source, op_lib, output, dtype) if onnx else (None, "")
            # Each cell compiles afresh: the matrix compiles the same forward for every
            # dtype and shape mode, which would otherwise hit dynamo's recompile limit.
            torch._dynamo.reset()
            compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
            shape = DYNAMIC_RUN_SHAPE if dynamic else STATIC_SHAPE
            for kind in input_kinds:
                if on_step:
                    on_step(f"run {dtype} {mode} {kind}")
                x = (seeded_input(shape, dtype, "cpu", seed=11) if kind == "random"
                     else special_values(shape, DTYPES[dtype], seed=11))
                with torch.no_grad():
                    eager = model(x)
                    compiled_out = compiled(x)
                (python_out,) = package.run([x])
                cpp_out = run_cpp_runner(runner, package_path, op_lib, x)
                pairs = {
                    IDENTITY_PAIR: compare_bits(eager, x),
                    "eager vs torch.compile": compare_bits(compiled_out, eager),
                    "eager vs AOTI-Python": compare_bits(python_out, eager),
                    "AOTI-Python vs AOTI-C++": compare_bits(cpp_out, python_out),
                }
                if onnx_session is not None:
                    (onnx_out,) = onnx_session.run([x])
                    pairs[ONNX_PAIR] = compare_bits(onnx_out, eager)
                cell = CellResult(dtype, mode, kind, shape, pairs, onnx_skipped=onnx_skipped)
                if not cell.identity_holds:
                    cell.layer_changes = attribute_layers(model, x)
                results.append(cell)
    return results


def _onnx_session(source: IdentitySource, op_lib: Path, output: Path, dtype: str) -> tuple[Any, str]:
    """Export the source's model to a portable ONNX file next to its package and
    load it: (session, "") or, for a dtype the ONNX target cannot run,
    (None, why). Any other failure raises."""
    from ..runtime.onnx_runtime import load_onnx

    try:
        exported = export_and_compile(source, ExportOptions(target="onnx", op_libraries=[op_lib]),
                                      output.with_suffix(".onnx"))
        return load_onnx(exported.package_path, exported.spec), ""
    except AotiDeployError as error:
        if dtype not in ONNX_UNSUPPORTED or ONNX_UNSUPPORTED[dtype] not in str(error):
            raise
        return None, str(error).strip().splitlines()[0]


# The only changes a native conv with weight 1 may make to special values.
EXPLAINED_KINDS = frozenset({"-0.0 became +0.0", "NaN payload or sign changed", "subnormal flushed to zero"})


def cell_passed(cell: CellResult) -> bool:
    """Every runtime pair is bit-identical; a random input keeps the identity; and on
    special values any deviation is explained: made by native layers only, and only
    of the known kinds (a custom layer must never change a bit)."""
    if not cell.runtimes_agree:
        return False
    if cell.identity_holds:
        return True
    if cell.input_kind == "random" or not cell.layer_changes or cell.custom_layer_changed_bits:
        return False
    return all(set(change.kinds) <= EXPLAINED_KINDS for change in cell.layer_changes)


def matrix_passed(results: list[CellResult]) -> bool:
    """Identity deviations of native layers are reported and attributed, not
    counted as failures of this toolkit; everything else must be bit-identical."""
    return bool(results) and all(cell_passed(cell) for cell in results)
