"""SiLU after a convolution in Inductor's loops: a speed setting of CPU packages
(compiler/speed.py).

With freezing, Inductor fuses a convolution with the SiLU after it into one oneDNN
call with a "swish" post-op (EfficientNet, RegNet-Y, YOLO-style models: every
convolution but the projections). oneDNN's swish is dear: on an AVX-512 host one
16 to 96 channel 1x1 convolution of a 112x112 map took 0.52 ms with it and 0.24 ms
without, and Inductor's own SiLU loop over the same output took 0.16 ms, its
memory traffic included. Inductor can also compute a SiLU inside the loops that read
it (a squeeze-and-excitation block's pooling and product) instead of writing it out.

The rewrite finds SiLU as the compile gets it, Inductor's decomposition
``x / (1 + exp(-x))`` of a convolution's output (through its batch norm, if any:
arithmetic with weights only, which freezing folds into the convolution), and
negates ``x`` as ``x * -1``. That is ``-x`` (a NaN's sign bit aside, which the
SiLU does not show), so the package computes eager's SiLU as Inductor's loops always
do, but the fusion pattern, which looks for ``neg``, no longer matches. The
convolution's own result still differs from eager's in bits, as every frozen one
does; like the other rewrites, this one applies only under the export's tolerance
(speed.py's rule), and a package whose check fails with it is compiled without it. It applies only where freezing is on: without freezing
no convolution is fused with its activation.

Measured on EfficientNet-B0 (batch 1, 2 threads, 33 SiLUs after convolutions, an
AVX-512 host): the C++ runner's p50 went down 7.5 % (the median of 11 interleaved
rounds' ratios), 3.7 % in a noisier run, 3 % at batch 8
(docs/performance-real-models.md).
"""

from __future__ import annotations

import torch

from .graph_copy import editable_copy, rewritten_program

_aten = torch.ops.aten


def _is_call(node: object, target: object, users: int | None = 1) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target
            and (users is None or len(node.users) == users))


_POINTWISE = (_aten.add.Tensor, _aten.sub.Tensor, _aten.mul.Tensor, _aten.div.Tensor)


def _data_nodes(graph: torch.fx.Graph, user_inputs: set[str]) -> set[torch.fx.Node]:
    """The nodes whose value depends on a user input (the rest are weights, buffers
    and what is computed from them alone)."""
    data: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if (node.op == "placeholder" and node.name in user_inputs) or any(
                arg in data for arg in node.all_input_nodes):
            data.add(node)
    return data


def _conv_output(node: object, data: set[torch.fx.Node]) -> bool:
    """Whether ``node`` is a non-transposed float32 convolution's output, or what an
    inference batch norm or bias makes of it: arithmetic with weights only, the
    convolution's side first (the decomposed batch norm, in the form freezing folds
    into the convolution)."""
    for _ in range(8):
        if not isinstance(node, torch.fx.Node) or node.op != "call_function":
            return False
        if node.target is _aten.convolution.default:
            value = node.meta.get("val")
            return (len(node.args) == 9 and not node.args[6] and isinstance(value, torch.Tensor)
                    and value.dtype == torch.float32)
        if node.target not in _POINTWISE or node.kwargs or len(node.args) != 2:
            return False
        data_side, other = node.args
        if data_side not in data or (isinstance(other, torch.fx.Node) and other in data):
            return False
        node = data_side
    return False


def _matches(node: torch.fx.Node, data: set[torch.fx.Node]) -> torch.fx.Node | None:
    """The convolution's output ``x`` if ``node`` is ``x / (1 + exp(-x))``, Inductor's
    SiLU, with its inner nodes read by nothing else."""
    if not _is_call(node, _aten.div.Tensor, users=None) or len(node.args) != 2:
        return None
    x, denominator = node.args
    # Freezing's pattern wants the SiLU's two reads (neg and div) and no other.
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or len(x.users) != 2:
        return None
    if not _conv_output(x, data) or not _is_call(denominator, _aten.add.Tensor) or denominator.args[1] != 1:
        return None
    if denominator.kwargs.get("alpha", 1) != 1:
        return None
    exp = denominator.args[0]
    if not _is_call(exp, _aten.exp.default):
        return None
    neg = exp.args[0]
    if not _is_call(neg, _aten.neg.default) or neg.args[0] is not x:
        return None
    return x


def count(program: torch.export.ExportedProgram) -> int:
    """How many SiLUs of a convolution's output ``program`` has (the program as the
    compile gets it: decomposed by Inductor's table)."""
    data = _data_nodes(program.graph, set(program.graph_signature.user_inputs))
    return sum(_matches(node, data) is not None for node in program.graph.nodes)


def unfused(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """A copy of ``program`` in which no SiLU of a convolution's output matches
    freezing's fusion; ``program`` is left as it was (the copy shares its weights)."""
    module, signature = editable_copy(program)
    graph = module.graph
    data = _data_nodes(graph, set(signature.user_inputs))
    for node in list(graph.nodes):
        x = _matches(node, data)
        if x is None:
            continue
        neg = node.args[1].args[0].args[0]
        # x * -1 is -x (a NaN may keep its sign bit, and x / d is x's NaN either
        # way), and the fusion pattern looks for neg.
        with graph.inserting_before(neg):
            negated = graph.call_function(_aten.mul.Tensor, (x, -1))
        neg.replace_all_uses_with(negated)
        for key in ("stack_trace", "nn_module_stack", "val"):
            if key in neg.meta:
                negated.meta[key] = neg.meta[key]
        graph.erase_node(neg)
    return rewritten_program(program, module, signature)
