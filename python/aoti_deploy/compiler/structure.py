"""What torch.export made of a model's call: the package's input and output names
taken from the model, the Python values it baked in, and a check that every output
is a tensor. The call itself is models/call.py."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import ExportError
from ..models.call import CONSTANT_TYPES, CallInputs

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def input_names(program: torch.export.ExportedProgram) -> list[str]:
    """The name of each tensor user input, in the package's order: torch.export's
    placeholder names, which are the model's argument names (``input_ids``), with
    dict keys and list positions joined on (``inputs_a``, ``pixels_0``)."""
    kinds = torch.export.graph_signature
    return [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == kinds.InputKind.USER_INPUT and isinstance(spec.arg, kinds.TensorArgument)
    ]


def constant_inputs(program: torch.export.ExportedProgram, example: CallInputs) -> list[dict[str, Any]]:
    """The non-tensor user inputs torch.export baked in, as the spec records them:
    each one's name, its leaf index in the flattened (args, kwargs) and its value.

    Raises:
        ExportError: an input torch.export made symbolic (a SymInt), which the
            package's runtimes could not pass.
    """
    kinds = torch.export.graph_signature
    user = [spec for spec in program.graph_signature.input_specs if spec.kind == kinds.InputKind.USER_INPUT]
    leaves = example.leaves()
    if len(user) != len(leaves):
        raise ExportError(
            f"torch.export saw {len(user)} user input(s) where the example call has {len(leaves)} leaves; "
            "cannot tell which inputs are baked in"
        )
    constants = []
    for index, (spec, leaf) in enumerate(zip(user, leaves)):
        if isinstance(spec.arg, kinds.TensorArgument):
            continue
        if isinstance(spec.arg, kinds.SymIntArgument) or isinstance(leaf, torch.SymInt):
            raise ExportError(
                f"input {spec.arg.name} is a symbolic int: the package's runtimes pass tensors only. Leave it out "
                "of dynamic_shapes so torch.export bakes its value in, or pass it as a 0-d tensor"
            )
        value = leaf if isinstance(leaf, CONSTANT_TYPES) else getattr(spec.arg, "value", None)
        constants.append({"name": spec.arg.name, "index": index, "value": value})
    return constants


def check_tensor_outputs(program: torch.export.ExportedProgram) -> None:
    """Raise ExportError, before any compile, when an output is not a tensor: the
    package's runtimes return tensors only."""
    kinds = torch.export.graph_signature
    output_node = next(node for node in program.graph.nodes if node.op == "output")
    user = [
        (spec, value)
        for spec, value in zip(program.graph_signature.output_specs, output_node.args[0])
        if spec.kind == kinds.OutputKind.USER_OUTPUT
    ]
    names = output_names(program.call_spec.out_spec) if program.call_spec.out_spec is not None else []
    for k, (spec, value) in enumerate(user):
        val = getattr(value, "meta", {}).get("val") if isinstance(value, torch.fx.Node) else value
        if not isinstance(val, torch.Tensor):
            name = names[k] if k < len(names) else f"output {k}"
            kind = "a symbolic int (SymInt)" if isinstance(val, torch.SymInt) else f"a {type(val).__name__}"
            raise ExportError(
                f"output {name} is {kind}, not a tensor; a package returns tensors only. Return it as a tensor "
                "(e.g. torch.tensor(x.shape[0]) or x.new_full((), n)), or compute it outside the model"
            )


def output_names(out_spec: pytree.TreeSpec) -> list[str]:
    """A name for each output leaf, from its place in the model's output: a dict key
    or dataclass field (``last_hidden_state``), joined with list or tuple positions
    (``pair_0``); ``output`` for a lone tensor and ``output_0``... for a top-level
    tuple. Unique, and made of letters, digits and underscores."""
    dummy = pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)
    names: list[str] = []
    for path, _ in pytree.tree_flatten_with_path(dummy)[0]:
        parts = [str(_key_part(key)) for key in path]
        if not parts:
            name = "output"
        elif isinstance(path[0], pytree.SequenceKey):
            name = "_".join(["output", *parts])
        else:
            name = "_".join(parts)
        name = _NAME_CHARS.sub("_", name)
        if not name[0].isalpha() and name[0] != "_":
            name = "output_" + name
        names.append(name)
    return bounded_names(names)


def returns_by_name(out_spec: pytree.TreeSpec) -> bool:
    """Whether the model returns its outputs by name: every output sits under a string
    key of the top-level container (a dict, an OrderedDict, a transformers
    ``ModelOutput``), so ``output_names`` are the model's keys (key paths, for values
    nested deeper). A lone tensor, a tuple or list, a namedtuple or a dataclass
    returns them by position."""
    dummy = pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)
    paths = [path for path, _ in pytree.tree_flatten_with_path(dummy)[0]]
    return bool(paths) and all(
        path and isinstance(path[0], pytree.MappingKey) and isinstance(path[0].key, str) for path in paths
    )


# The longest name a spec holds (package/spec.py and package_spec.cpp refuse longer).
MAX_NAME_LENGTH = 128


def bounded_names(names: Sequence[str]) -> list[str]:
    """``names`` made fit for a spec: each at most MAX_NAME_LENGTH characters (a deep
    key path is cut) and unique (a repeat gets ``_1``, ``_2``...)."""
    bounded: list[str] = []
    for name in names:
        base = name[: MAX_NAME_LENGTH - 8]
        unique, k = (name if len(name) <= MAX_NAME_LENGTH else base), 1
        while unique in bounded:
            unique, k = f"{base}_{k}", k + 1
        bounded.append(unique)
    return bounded


def _key_part(key: Any) -> object:
    for attribute in ("key", "idx", "name"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return key
