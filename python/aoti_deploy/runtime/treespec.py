"""A package's recorded output structure (torch's ``treespec_dumps``), loaded back
even where a type in it cannot be imported: the runtimes rebuild the model's own
output (a dict, a tuple, a ModelOutput) from it."""

from __future__ import annotations

import importlib
import json
from typing import Any

import torch.utils._pytree as pytree


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
