"""A model's call as torch.export sees it: the example args and kwargs as one pytree,
whose tensor leaves are the package's inputs in order and whose other leaves (Python
ints, bools, floats, strings, None) torch.export bakes into the compiled code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import InputError

# What a constant input may be: torch.export bakes these into the graph.
CONSTANT_TYPES = (bool, int, float, str, type(None))


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
            if not isinstance(leaf, (torch.Tensor, *CONSTANT_TYPES)):
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
