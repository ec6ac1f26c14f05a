"""Stage 1 for a user's own model: import a ``package.module:factory`` target, call
it, and describe its example inputs and dynamic dims. The IdentityModel stays the
default; everything here works for any exportable module."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.utils._pytree as pytree
from torch import nn

from ..errors import ModelError
from ..package.spec_types import SCALAR_DTYPES

if TYPE_CHECKING:
    from .call import CallInputs

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class DynamicDim:
    """One dynamic size shared by every (input, dim) position in ``positions``: the
    package accepts any size in [min, max] there (min and up when max is None), the
    same size at each position."""

    positions: tuple[tuple[int, int], ...]
    min: int
    max: int | None
    label: str = ""

    @property
    def name(self) -> str:
        """The torch.export Dim name: the label, else ``in0_d2`` for input 0, dim 2."""
        i, d = self.positions[0]
        return self.label or f"in{i}_d{d}"

    def __str__(self) -> str:
        where = ",".join(f"{i}.{d}" for i, d in self.positions)
        return f"{where}={self.min}:{'' if self.max is None else self.max}"


def import_modules(names: Sequence[str], what: str = "--fake-module") -> None:
    """Import each module (e.g. one that registers fakes or Python ops) from
    ``sys.path``, which this never changes (the CLIs put the working folder on it, as
    ``python -m`` would: ``cli.common.put_working_folder_on_path``).

    Raises:
        ModelError: the module cannot be imported; torch's or Python's reason included.
    """
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # an import runs arbitrary user code
            raise ModelError(
                f"{what} {name}: could not import it: {type(error).__name__}: {error}\n"
                "Run from the folder that contains the module's top-level Python package, or install "
                "it into this environment."
            ) from error


def load_model(target: str, kwargs: dict[str, object] | None = None) -> tuple[nn.Module, "CallInputs | None"]:
    """Import ``package.module:factory`` and call ``factory(**kwargs)``.

    Args:
        target: the factory, as ``package.module:function``.
        kwargs: keyword arguments for the factory.

    Returns:
        ``(module, example_call)``; example_call is None when the factory returns a
        module only. A factory may return ``(module, args)``, ``(module, kwargs)``
        (a dict: keyword arguments by name) or ``(module, args, kwargs)``, with args
        and kwargs as torch.export takes them (tensors, dicts, lists and tuples of
        them, Python scalars). A lone dict argument goes in a tuple: ``(module, (d,))``.

    Raises:
        ModelError: bad target, import failure, the factory raised, or it returned
            something other than a module, a (module, args) or a (module, args,
            kwargs) tuple.
    """
    from .call import CallInputs
    from ..errors import InputError

    if not _TARGET.match(target):
        raise ModelError(f"--model {target!r}: expected package.module:factory, e.g. my_models.zoo:build_model")
    module_name, factory_name = target.split(":")
    import_modules([module_name], what="--model")
    module = sys.modules[module_name]
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ModelError(f"--model {target}: module {module_name} has no callable {factory_name!r}")
    try:
        made = factory(**(kwargs or {}))
    except Exception as error:  # the factory is user code
        raise ModelError(f"--model {target}: the factory raised {type(error).__name__}: {error}") from error
    call = None
    if isinstance(made, tuple) and len(made) in (2, 3) and isinstance(made[0], nn.Module):
        made, args, *rest = made
        call_kwargs = rest[0] if rest else None
        if isinstance(args, dict) and not rest:  # (module, {name: value}): keyword arguments
            args, call_kwargs = (), args
        elif not isinstance(args, (torch.Tensor, tuple, list)):
            args = (args,)
        try:
            call = CallInputs.of(args, call_kwargs)
            call.check_leaves()
        except InputError as error:
            raise ModelError(f"--model {target}: {error}") from error
        if not call.tensors():
            raise ModelError(f"--model {target}: the example inputs hold no tensor, got {_types(tuple(args))}")
    if not isinstance(made, nn.Module):
        raise ModelError(
            f"--model {target}: the factory returned a {type(made).__name__}; expected an nn.Module, "
            "or a tuple (module, args) or (module, args, kwargs)"
        )
    return made, call


def flatten_outputs(value: object) -> list[torch.Tensor]:
    """A model's output (tensor, tuple, list, dict, nested) as the flat list of
    tensors a package returns, in pytree order: a Python int, float or bool as the 0-d
    tensor of its kind a package carries it in (int64, float64, bool).

    Raises:
        ModelError: a leaf is none of these (a package returns tensors and Python
            scalars only).
    """
    leaves = pytree.tree_leaves(value)
    flat = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            flat.append(leaf)
            continue
        kind = "bool" if isinstance(leaf, bool) else "int" if isinstance(leaf, int) else \
            "float" if isinstance(leaf, float) else None
        if kind is None:
            raise ModelError(f"output leaf {i} is a {type(leaf).__name__}; a package returns tensors and Python ints, "
                             "floats and bools only")
        try:
            flat.append(torch.tensor(leaf, dtype=getattr(torch, SCALAR_DTYPES[kind])))
        except (RuntimeError, ValueError, OverflowError) as error:  # an int past int64
            raise ModelError(f"output leaf {i} is the int {leaf}, which an int64 cannot hold") from error
    return flat


def _types(values: object) -> str:
    return ", ".join(type(v).__name__ for v in values) if isinstance(values, tuple) else type(values).__name__

