"""GELU and SiLU after a linear in Inductor's loops: a speed setting of CPU packages
(compiler/speed.py).

With freezing, Inductor packs a linear's weights for oneDNN and fuses the linear
with the GELU or SiLU after it into one oneDNN call with a "gelu" or "swish"
post-op: a transformer's MLP (BERT, ViT and GPT-2's GELU, Llama's SwiGLU gate) and
ConvNeXt's pointwise MLP. That post-op is dear. On an AVX2 host one 3136x96 by 96x384
linear (ConvNeXt-T's first) took 2.06 ms with the GELU fused and 1.34 ms without,
while a separate GELU over its output took about 0.6 ms; over ConvNeXt-T's 18 MLPs the
fused GELUs cost 67 ms against 59 (docs/performance-real-models.md). Inductor's own
loop computes the activation instead, fused with whatever reads it next where it can.

The rewrite finds each activation as the compile gets it, decomposed by Inductor's
table, of the output of a float32 linear whose weight is a weight (a constant that
freezing packs), through the views of a linear on more than two dims:

- GELU, ``(x * 0.5) * (1 + erf(x * 0.7071...))`` or its tanh form: the outer product's
  two operands are swapped. A float multiplication is commutative to the bit (but
  for which NaN's payload a compiled loop keeps when both operands are NaN), so the
  package computes what Inductor's loops always compute, but freezing's pattern,
  which wants ``x * 0.5`` first, no longer matches.
- SiLU, ``x / (1 + exp(-x))``: ``-x`` becomes ``x * -1``, as conv_silu.py does for
  convolutions (the pattern looks for ``neg``).

The linear's own result differs from eager's in bits, as every frozen one does; like
the other rewrites this one applies only under the export's tolerance (speed.py's
rule), only where freezing is on, and a package whose check fails with it is
compiled without it.
"""

from __future__ import annotations

import torch

from .conv_silu import _data_nodes, _is_call
from .graph_copy import editable_copy, rewritten_program

_aten = torch.ops.aten
_VIEWS = (_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default)
# Inductor's decompositions of GELU (torch._decomp's gelu: x * 0.5 * (1 + erf(x / sqrt(2)))).
_SQRT1_2 = 0.7071067811865476
_TANH_SCALE, _TANH_CUBE = 0.7978845608028654, 0.044715


def _float32(node: object) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


def _linear_output(node: object, data: set[torch.fx.Node]) -> bool:
    """Whether ``node`` is a float32 linear's output: ``addmm(bias, x, w.T)`` or
    ``mm(x, w.T)`` with ``w`` a weight (no user input in it), as freezing packs it,
    or a view of one (a linear of a 3-d input)."""
    if not _float32(node):
        return False
    for _ in range(3):
        if not isinstance(node, torch.fx.Node) or node.op != "call_function":
            return False
        if node.target in _VIEWS:
            node = node.args[0]
            continue
        if node.target is _aten.addmm.default and len(node.args) == 3 and not node.kwargs:
            weight = node.args[2]
        elif node.target is _aten.mm.default and len(node.args) == 2:
            weight = node.args[1]
        else:
            return False
        if (isinstance(weight, torch.fx.Node) and weight.op == "call_function"
                and weight.target in (_aten.permute.default, _aten.t.default)):
            weight = weight.args[0]
        return isinstance(weight, torch.fx.Node) and weight not in data
    return False


def _scaled(node: object, x: torch.fx.Node, scale: float) -> bool:
    """Whether ``node`` is ``x * scale``, read by one node."""
    return _is_call(node, _aten.mul.Tensor) and tuple(node.args) == (x, scale) and not node.kwargs


def _gelu(node: torch.fx.Node, data: set[torch.fx.Node]) -> torch.fx.Node | None:
    """The linear's output ``x`` if ``node`` is ``(x * 0.5) * (1 + erf(x * 0.7071...))``
    or ``(x * 0.5) * (1 + tanh((x + x * x * x * 0.044715) * 0.7978...))``, the two
    forms freezing's patterns look for."""
    if not _is_call(node, _aten.mul.Tensor, users=None) or len(node.args) != 2 or node.kwargs:
        return None
    half, one_plus = node.args
    if not _is_call(half, _aten.mul.Tensor) or len(half.args) != 2 or half.args[1] != 0.5:
        return None
    x = half.args[0]
    if (not _linear_output(x, data) or not _is_call(one_plus, _aten.add.Tensor) or one_plus.kwargs
            or len(one_plus.args) != 2):
        return None
    inner, one = one_plus.args
    if one != 1:
        return None
    if _is_call(inner, _aten.erf.default) and len(x.users) == 2 and _scaled(inner.args[0], x, _SQRT1_2):
        return x
    if not _is_call(inner, _aten.tanh.default) or len(x.users) != 4:
        return None
    scaled = inner.args[0]
    if not _is_call(scaled, _aten.mul.Tensor) or len(scaled.args) != 2 or scaled.args[1] != _TANH_SCALE:
        return None
    total = scaled.args[0]
    if not _is_call(total, _aten.add.Tensor) or total.kwargs or len(total.args) != 2 or total.args[0] is not x:
        return None
    cube = total.args[1]
    if not _is_call(cube, _aten.mul.Tensor) or len(cube.args) != 2 or cube.args[1] != _TANH_CUBE:
        return None
    cubed = cube.args[0]
    if not _is_call(cubed, _aten.mul.Tensor) or len(cubed.args) != 2 or cubed.args[1] is not x:
        return None
    squared = cubed.args[0]
    return x if _is_call(squared, _aten.mul.Tensor) and tuple(squared.args) == (x, x) else None


def _silu(node: torch.fx.Node, data: set[torch.fx.Node]) -> torch.fx.Node | None:
    """The ``neg`` of ``x / (1 + exp(-x))`` if ``x`` is a linear's output read by the
    SiLU alone."""
    if not _is_call(node, _aten.div.Tensor, users=None) or len(node.args) != 2 or node.kwargs:
        return None
    x, denominator = node.args
    if not _linear_output(x, data) or len(x.users) != 2:
        return None
    if (not _is_call(denominator, _aten.add.Tensor) or len(denominator.args) != 2 or denominator.args[1] != 1
            or denominator.kwargs):
        return None
    exp = denominator.args[0]
    if not _is_call(exp, _aten.exp.default) or len(exp.args) != 1:
        return None
    neg = exp.args[0]
    return neg if _is_call(neg, _aten.neg.default) and neg.args[0] is x else None


def count(program: torch.export.ExportedProgram) -> int:
    """How many GELUs and SiLUs of a linear's output ``program`` has (the program as
    the compile gets it: decomposed by Inductor's table)."""
    data = _data_nodes(program.graph, set(program.graph_signature.user_inputs))
    return sum(_gelu(node, data) is not None or _silu(node, data) is not None for node in program.graph.nodes)


def unfused(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of ``program`` in which no GELU or SiLU of a linear's output matches
    freezing's fusion; ``program`` is left as it was (the copy shares its weights)."""
    module, signature = editable_copy(program)
    graph = module.graph
    data = _data_nodes(graph, set(signature.user_inputs))
    for node in list(graph.nodes):
        if _gelu(node, data) is not None:
            # (x * 0.5) * s is s * (x * 0.5), to the bit.
            node.args = (node.args[1], node.args[0])
            continue
        neg = _silu(node, data)
        if neg is None:
            continue
        with graph.inserting_before(neg):
            negated = graph.call_function(_aten.mul.Tensor, (neg.args[0], -1))
        neg.replace_all_uses_with(negated)
        for key in ("stack_trace", "nn_module_stack", "val"):
            if key in neg.meta:
                negated.meta[key] = neg.meta[key]
        graph.erase_node(neg)
    return rewritten_program(program, module, signature)
