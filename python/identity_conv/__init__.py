"""Export a PyTorch model with custom C++/CUDA ops, compile it with AOTInductor,
and run it from Python or from a C++ binary with no Python, verified bit-for-bit."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CompileError,
    ExportError,
    IdentityConvError,
    InputError,
    ModelError,
    OpLibraryError,
    PackageError,
    VerificationError,
)
from . import _moved

_moved.install()

# The op layer imports torch; it loads on first use (PEP 562), so the CLIs' --help
# and the light modules (errors, locate) start without it.
_LAZY = {"identity_conv": ".ops", "load_op_library": ".ops"}

if TYPE_CHECKING:
    from .ops import identity_conv, load_op_library


_SUBPACKAGES = ("bench", "cli", "compiler", "models", "ops", "package", "runtime", "verify", "errors", "locate")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:  # as an eager import of them made them attributes
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "CompileError",
    "ExportError",
    "IdentityConvError",
    "InputError",
    "ModelError",
    "OpLibraryError",
    "PackageError",
    "VerificationError",
    "identity_conv",
    "load_op_library",
]
