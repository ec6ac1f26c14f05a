"""Lazy module attributes (PEP 562), shared by the packages whose names would import
torch: a name loads its module on first use, and a submodule resolves as an attribute
as an eager import would have made it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_attributes(module: str, names: dict[str, str], submodules: tuple[str, ...]
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``module``: ``names`` maps each lazy name
    to the relative module that defines it ("." + submodule)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name], module), name)
            setattr(sys.modules[module], name, value)
            return value
        if name in submodules:
            return importlib.import_module(f".{name}", module)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module]), *names})

    return __getattr__, __dir__
