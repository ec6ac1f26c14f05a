"""One-pixel convolutions as sums: a speed setting of CPU packages (compiler/speed.py).

A conv2d whose input is one pixel (H = W = 1, as after a global pooling) and whose
kernel is 1x1 is a matrix-vector product per image. Squeeze-and-excitation blocks
(EfficientNet, MobileNetV3, RegNet) have two per block. Compiled as convolutions,
each is a oneDNN call with its per-call set-up, for a few thousand multiply-adds.
Written as ``sum(x * w, -1)``, Inductor fuses each into one reduction loop beside the
pooling and activations around it, with no library call.

Measured on EfficientNet-B0 (batch 1, 2 threads, 32 such convs): the C++ runner's
p50 went from 12.1 ms to 11.1 ms (docs/performance-real-models.md).

The sum is in another order than oneDNN's, so the package is not bit for bit the
same as eager; it is held to the export's tolerance like any package. A package
checked bitwise, or one whose check fails with the rewrite, is compiled without it
(speed.py's rule).
"""

from __future__ import annotations

import torch

from .graph_copy import editable_copy, rewritten_program

_aten = torch.ops.aten
# conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); the
# .padding overload takes padding as "valid" or "same" (no padding, for a 1x1 kernel).
_CONV2D_DEFAULTS = (None, None, None, [1, 1], [0, 0], [1, 1], 1)
_NO_PADDING = ([0, 0], "valid", "same")
# Where the measurement stops: images per call (a larger batch is a matrix product,
# which a GEMM library does better than a reduction loop) and weight elements.
MAX_BATCH = 1
MAX_WEIGHT_ELEMENTS = 1 << 22


def _conv_args(node: torch.fx.Node) -> tuple[object, object, object, object, object] | None:
    """(input, weight, bias, padding, groups) of a 2-d convolution node: conv2d as
    exported, or convolution as the export's decomposition leaves it."""
    if node.op != "call_function":
        return None
    if node.target in (_aten.conv2d.default, _aten.conv2d.padding):
        args = list(node.args) + list(_CONV2D_DEFAULTS[len(node.args):])
        x, weight, bias, _stride, padding, _dilation, groups = args[:7]
        return x, weight, bias, padding, groups
    if node.target is _aten.convolution.default and len(node.args) == 9:
        x, weight, bias, _stride, padding, _dilation, transposed, _output_padding, groups = node.args
        return None if transposed else (x, weight, bias, padding, groups)
    return None


def _matches(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node | None] | None:
    """(input, weight, bias) if ``node`` is a float32 CPU conv of a one-pixel input
    with a 1x1 kernel, no padding and one group, at a static batch of at most
    MAX_BATCH."""
    conv = _conv_args(node)
    if conv is None:
        return None
    x, weight, bias, padding, groups = conv
    if not isinstance(x, torch.fx.Node) or not isinstance(weight, torch.fx.Node):
        return None
    x_val, w_val = x.meta.get("val"), weight.meta.get("val")
    if not isinstance(x_val, torch.Tensor) or not isinstance(w_val, torch.Tensor) or x_val.dim() != 4:
        return None
    if x_val.dtype != torch.float32 or w_val.dtype != torch.float32 or x_val.device.type != "cpu":
        return None
    batch, _, height, width = x_val.shape
    if not all(isinstance(size, int) for size in (batch, height, width)) or (height, width) != (1, 1):
        return None
    padding = list(padding) if isinstance(padding, (list, tuple)) else padding
    if batch > MAX_BATCH or groups != 1 or padding not in _NO_PADDING:
        return None
    if w_val.dim() != 4 or tuple(w_val.shape[2:]) != (1, 1) or w_val.numel() > MAX_WEIGHT_ELEMENTS:
        return None
    return x, weight, bias if isinstance(bias, torch.fx.Node) else None


def count(program: torch.export.ExportedProgram) -> int:
    """How many convs of ``program`` the rewrite applies to."""
    return sum(_matches(node) is not None for node in program.graph.nodes)


def as_sums(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of ``program`` with each one-pixel conv written as a sum; ``program`` is
    left as it was (the copy shares its weights)."""
    module, signature = editable_copy(program)
    graph = module.graph
    for node in list(graph.nodes):
        matched = _matches(node)
        if matched is None:
            continue
        x, weight, bias = matched
        batch, channels_in = x.meta["val"].shape[:2]
        channels_out = weight.meta["val"].shape[0]
        with graph.inserting_before(node):
            rows = graph.call_function(_aten.reshape.default, (x, [batch, 1, channels_in]))
            matrix = graph.call_function(_aten.reshape.default, (weight, [1, channels_out, channels_in]))
            products = graph.call_function(_aten.mul.Tensor, (rows, matrix))
            total = graph.call_function(_aten.sum.dim_IntList, (products, [2]))
            biased = graph.call_function(_aten.add.Tensor, (total, bias)) if bias is not None else total
            result = graph.call_function(_aten.reshape.default, (biased, [batch, channels_out, 1, 1]))
        new = [rows, matrix, products, total, result] + ([biased] if bias is not None else [])
        fake_x = x.meta["val"]
        with fake_x.fake_mode:
            rows.meta["val"] = fake_x.reshape(batch, 1, channels_in)
            matrix.meta["val"] = weight.meta["val"].reshape(1, channels_out, channels_in)
            products.meta["val"] = rows.meta["val"] * matrix.meta["val"]
            total.meta["val"] = products.meta["val"].sum(2)
            biased.meta["val"] = total.meta["val"] + bias.meta["val"] if bias is not None else total.meta["val"]
            result.meta["val"] = biased.meta["val"].reshape(batch, channels_out, 1, 1)
        for added in new:
            for key in ("stack_trace", "nn_module_stack"):
                if key in node.meta:
                    added.meta[key] = node.meta[key]
        name = node.name
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        # A conv that was a graph output keeps its place in the program's signature.
        for spec in signature.output_specs:
            if getattr(spec.arg, "name", None) == name:
                spec.arg = type(spec.arg)(name=result.name)
    return rewritten_program(program, module, signature)
