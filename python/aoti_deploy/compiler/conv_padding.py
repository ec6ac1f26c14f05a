"""Zero pads folded into convolutions: a speed setting of CPU packages (compiler/speed.py).

Models ported from TensorFlow pad each convolution's input with zeros by hand before
a convolution with no padding of its own (transformers' MobileNetV1/V2 with
``tf_padding``, its default: ``F.pad`` before every convolution, 1x1 ones
included). Inductor compiles each such pad as a loop that copies the whole
activation into a larger buffer, before oneDNN reads it again. Where the pad is the
same on both sides of each dimension, the convolution can pad implicitly instead:
``conv(pad(x, [l, l, t, t]), padding=p)`` is ``conv(x, padding=p + [t, l])``. A
pad of zero on every side is dropped.

The convolution then skips the padded zeros rather than multiplying them, and may sum
in another order, so the package is not bit for bit the same as eager (a weight of
inf or NaN would meet no padded zero, too); it is held to the export's tolerance like
any package, and a package checked bitwise, or one whose check fails with the
rewrite, is compiled without it (speed.py's rule). A pad on one side only (the
"SAME" padding of an even input at stride 2) has no convolution equivalent and is
kept.
"""

from __future__ import annotations

import torch

from .graph_copy import editable_copy, rewritten_program

_aten = torch.ops.aten
# convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
_PADDING = 4


def _symmetric_zero_pad(node: torch.fx.Node) -> tuple[torch.fx.Node, int, int] | None:
    """(input, top, left) if ``node`` pads a 4-d tensor's height and width with zeros,
    the same on both sides of each (every amount at least 0)."""
    if node.op != "call_function" or node.target is not _aten.constant_pad_nd.default:
        return None
    x, pad = node.args[0], list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    if not isinstance(x, torch.fx.Node) or value != 0 or len(pad) != 4:
        return None
    x_val = x.meta.get("val")
    if not isinstance(x_val, torch.Tensor) or x_val.dim() != 4 or not x_val.dtype.is_floating_point:
        return None
    left, right, top, bottom = pad
    if not all(isinstance(amount, int) and amount >= 0 for amount in pad) or left != right or top != bottom:
        return None
    return x, top, left


def _folds_into(conv: torch.fx.Node, pad: torch.fx.Node) -> bool:
    """Whether ``conv`` is a 2-d, non-transposed convolution whose input (and only
    its input) is ``pad``."""
    if conv.op != "call_function" or conv.target is not _aten.convolution.default or len(conv.args) != 9:
        return False
    if conv.args[0] is not pad or any(arg is pad for arg in conv.args[1:]) or conv.args[6]:
        return False
    padding = conv.args[_PADDING]
    return isinstance(padding, (list, tuple)) and len(padding) == 2 and all(isinstance(p, int) for p in padding)


def _matches(node: torch.fx.Node) -> tuple[torch.fx.Node, int, int] | None:
    """(input, top, left) if ``node`` is a symmetric zero pad whose every user is a
    convolution it folds into."""
    pad = _symmetric_zero_pad(node)
    if pad is None or not node.users or not all(_folds_into(user, node) for user in node.users):
        return None
    return pad


def count(program: torch.export.ExportedProgram) -> int:
    """How many pads of ``program`` the rewrite folds (the program as the compile
    gets it: decomposed, so convolutions are ``aten.convolution``)."""
    return sum(_matches(node) is not None for node in program.graph.nodes)


def into_convs(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of ``program`` with each symmetric zero pad folded into the
    convolutions that read it; ``program`` is left as it was (the copy shares its
    weights)."""
    module, signature = editable_copy(program)
    graph = module.graph
    for node in list(graph.nodes):
        matched = _matches(node)
        if matched is None:
            continue
        x, top, left = matched
        for conv in list(node.users):
            args = list(conv.args)
            args[0] = x
            args[_PADDING] = [args[_PADDING][0] + top, args[_PADDING][1] + left]
            conv.args = tuple(args)
        graph.erase_node(node)
    return rewritten_program(program, module, signature)
