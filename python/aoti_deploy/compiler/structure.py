"""A model's call as torch.export sees it: the example args and kwargs as one pytree,
whose tensor leaves are the package's inputs in order and whose other leaves (Python
ints, bools, floats, strings, None) torch.export bakes into the compiled code; and
the names of the package's inputs and outputs, taken from the model."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import ExportError, InputError

# What a constant input may be: torch.export bakes these into the graph.
_CONSTANT_TYPES = (bool, int, float, str, type(None))
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


@dataclass
class CallInputs:
    """A model call's positional and keyword arguments, nested as the model takes
    them (tensors, dicts, lists, tuples, Python scalars)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, args: Any, kwargs: Mapping[str, Any] | None = None) -> "CallInputs":
        """``args`` as torch.export takes it (a tuple or list of arguments), or one
        tensor for a single-argument model."""
        if isinstance(args, torch.Tensor):
            args = (args,)
        if not isinstance(args, (tuple, list)):
            raise InputError(
                f"args must be a tuple of the model's positional arguments (or one tensor), got a "
                f"{type(args).__name__}; wrap a single argument as (value,)"
            )
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InputError(f"kwargs must be a dict of the model's keyword arguments, got a {type(kwargs).__name__}")
        return cls(tuple(args), dict(kwargs or {}))

    def leaves(self) -> list[Any]:
        return pytree.tree_leaves((self.args, self.kwargs))

    def tensors(self) -> list[torch.Tensor]:
        """The tensor leaves, in the order the package takes them."""
        return [leaf for leaf in self.leaves() if isinstance(leaf, torch.Tensor)]

    def with_tensors(self, tensors: Sequence[torch.Tensor]) -> "CallInputs":
        """The same call with its tensor leaves replaced, in order."""
        leaves, spec = pytree.tree_flatten((self.args, self.kwargs))
        replacements = iter(tensors)
        new_leaves = [next(replacements) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        args, kwargs = pytree.tree_unflatten(new_leaves, spec)
        return CallInputs(tuple(args), dict(kwargs))

    def map_tensors(self, fn: Any) -> "CallInputs":
        return self.with_tensors([fn(x) for x in self.tensors()])

    def call(self, model: Any) -> Any:
        return model(*self.args, **self.kwargs)

    def check_leaves(self) -> None:
        """Raise InputError for a leaf that torch.export can neither trace (a tensor)
        nor bake in (a Python scalar or string)."""
        for path, leaf in pytree.tree_flatten_with_path((self.args, self.kwargs))[0]:
            if not isinstance(leaf, (torch.Tensor, *_CONSTANT_TYPES)):
                raise InputError(
                    f"example input {_path_text(path)} is a {type(leaf).__name__}; a package takes tensors, "
                    "dicts, lists and tuples of them, and Python ints, floats, bools and strings (baked in)"
                )


def _path_text(path: tuple[Any, ...]) -> str:
    """A leaf's place in (args, kwargs), as a user writes it: ``args[1]['a']`` or
    ``kwargs['mask']``."""
    if not path:
        return "(the input)"
    head, rest = path[0], path[1:]
    root = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    return root + pytree.keystr(rest)


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
        value = leaf if isinstance(leaf, _CONSTANT_TYPES) else getattr(spec.arg, "value", None)
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


def load_treespec(text: str) -> pytree.TreeSpec | None:
    """A treespec recorded by torch (``treespec_dumps``), loaded even when a type in
    it is not importable here: the module that defines it is imported when it can
    be (e.g. transformers' ``ModelOutput`` classes), and a type still unknown
    becomes a dict with the same keys. None when that fails too: the caller then
    returns the outputs by name."""
    try:
        return pytree.treespec_loads(text)
    except Exception:  # torch raises NotImplementedError/KeyError for unregistered types
        pass
    try:
        protocol, tree = json.loads(text)
    except (ValueError, TypeError):
        return None
    for type_name in _type_names(tree):
        module = type_name.rpartition(".")[0]
        if module and type_name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
            try:
                importlib.import_module(module)
            except Exception:  # not installed, or it fails to import: fall back below
                pass
    try:
        return pytree.treespec_loads(text)
    except Exception:
        pass
    try:
        return pytree.treespec_loads(json.dumps([protocol, _as_dicts(tree)]))
    except Exception:
        return None


def _type_names(tree: Any) -> list[str]:
    if not isinstance(tree, dict):
        return []
    names = [tree["type"]] if isinstance(tree.get("type"), str) else []
    for child in tree.get("children_spec", []):
        names += _type_names(child)
    return names


def _as_dicts(tree: dict[str, Any]) -> dict[str, Any]:
    """The treespec JSON with each type this process cannot rebuild turned into a
    dict keyed by the type's recorded keys (transformers' ModelOutput records its
    field names), or by position when it recorded none."""
    children = [_as_dicts(child) for child in tree.get("children_spec", [])]
    type_name = tree.get("type")
    if type_name is None or type_name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        return {**tree, "children_spec": children}
    try:
        keys = json.loads(tree.get("context") or "null")
    except ValueError:
        keys = None
    if not (isinstance(keys, list) and len(keys) == len(children) and all(isinstance(k, str) for k in keys)):
        keys = [f"output_{k}" for k in range(len(children))]
    return {"type": "builtins.dict", "context": json.dumps(keys), "children_spec": children}
