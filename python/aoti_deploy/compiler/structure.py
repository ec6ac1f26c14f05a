"""What torch.export made of a model's call: the package's input and output names
taken from the model, the Python values it baked in, and its outputs made tensors (a
Python int, float or bool it returns becomes a 0-d tensor of its kind). The call
itself is models/call.py."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import ExportError
from ..models.call import CONSTANT_TYPES, CallInputs
from ..package.spec import SCALAR_DTYPES, TENSOR_KIND

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


def scalar_outputs_as_tensors(program: torch.export.ExportedProgram) -> list[str]:
    """Make every user output a tensor, in place, and return each one's kind: "tensor",
    or "int", "float" or "bool" for a Python scalar the model returns (a SymInt,
    SymFloat or SymBool torch.export traced, e.g. ``x.sum().item()`` or ``x.shape[0]``,
    or a constant). Each scalar becomes ``aten.scalar_tensor`` of its kind's dtype
    (SCALAR_DTYPES: Python's own widths). AOTI would return most scalars as 0-d tensors
    itself, but in the dtype of whatever computed them (int32 for ``.item()`` of an int32
    tensor, float32 of a float32 one), and refuses a float constant; this way each
    runtime gets one known dtype per kind, and rebuilds the Python value from it.

    Raises:
        ExportError: before any compile, for an output that is none of these (None, a
            string), or an int constant past int64.
    """
    kinds = torch.export.graph_signature
    graph = program.graph_module.graph
    output_node = next(node for node in graph.nodes if node.op == "output")
    specs = program.graph_signature.output_specs
    values = list(output_node.args[0])
    names = output_names(program.call_spec.out_spec) if program.call_spec.out_spec is not None else []
    found: list[str] = []
    fake_mode = None
    for position, (spec, value) in enumerate(zip(specs, values)):
        if spec.kind != kinds.OutputKind.USER_OUTPUT:
            continue
        k = len(found)
        name = names[k] if k < len(names) else f"output {k}"
        val = getattr(value, "meta", {}).get("val") if isinstance(value, torch.fx.Node) else value
        if isinstance(val, torch.Tensor):
            found.append(TENSOR_KIND)
            continue
        kind = _scalar_kind(val)
        if kind is None:
            raise ExportError(
                f"output {name} is {'None' if val is None else f'a {type(val).__name__}'}; a package returns tensors "
                "and Python ints, floats and bools. Leave it out of the model's output, or return it as a tensor"
            )
        if kind == "int" and isinstance(val, int) and not -(2**63) <= val < 2**63:
            raise ExportError(f"output {name} is the int {val}, past int64, which a package carries ints in")
        fake_mode = fake_mode or _fake_mode(graph)
        dtype = getattr(torch, SCALAR_DTYPES[kind])
        with graph.inserting_before(output_node):
            node = graph.call_function(torch.ops.aten.scalar_tensor.default, (value,), {"dtype": dtype})
        with fake_mode:
            node.meta["val"] = torch.ops.aten.scalar_tensor.default(val, dtype=dtype)
        values[position] = node
        specs[position] = dataclasses.replace(spec, arg=kinds.TensorArgument(name=node.name))
        found.append(kind)
    if any(kind != TENSOR_KIND for kind in found):
        output_node.args = (tuple(values),)
        program.graph_module.recompile()
    return found


def _scalar_kind(value: object) -> str | None:
    """"bool", "int" or "float" for a Python scalar or its symbolic form, else None
    (bool first: a bool is an int in Python)."""
    if isinstance(value, (bool, torch.SymBool)):
        return "bool"
    if isinstance(value, (int, torch.SymInt)):
        return "int"
    if isinstance(value, (float, torch.SymFloat)):
        return "float"
    return None


def _fake_mode(graph: torch.fx.Graph) -> Any:
    """The fake mode the program was traced in (its symbols' shape env), for the meta
    value of a node added to it; a fresh one for a graph without tensor inputs."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    values = [node.meta.get("val") for node in graph.nodes if node.op == "placeholder"]
    return detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)]) or FakeTensorMode()


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
