"""An exported program's graph, copied for a rewrite (pixel_convs.py, conv_padding.py),
and the rewritten program made from the copy.

Copying a graph renames a node whose name shadows a Python builtin (``input``, the
argument name of ``nn.Sequential.forward``, becomes ``input_1``), while the copied
signature still names the original, and the rewritten program then fails
torch.export's check. The copy's signature is given the copy's names."""

from __future__ import annotations

import copy

import torch


def editable_copy(program: torch.export.ExportedProgram) -> tuple[torch.fx.GraphModule, object]:
    """(graph module, graph signature) of ``program``, copied, naming the same nodes."""
    module = copy.deepcopy(program.graph_module)
    signature = copy.deepcopy(program.graph_signature)
    renamed = {old.name: new.name for old, new in zip(program.graph.nodes, module.graph.nodes) if old.name != new.name}
    for spec in [*signature.input_specs, *signature.output_specs]:
        name = getattr(spec.arg, "name", None)
        if name in renamed:
            spec.arg = type(spec.arg)(name=renamed[name])
    return module, signature


def rewritten_program(program: torch.export.ExportedProgram, module: torch.fx.GraphModule,
                      signature: object) -> torch.export.ExportedProgram:
    """``program`` with the rewritten copy's graph (from ``editable_copy``), checked
    by torch.export."""
    module.graph.lint()
    module.recompile()
    rewritten = program._update(module, signature)
    rewritten.validate()
    return rewritten
