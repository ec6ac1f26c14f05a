"""Export a PyTorch model with custom C++/CUDA ops, compile it with AOTInductor,
and run it from Python or from a C++ binary with no Python, verified bit-for-bit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_attributes

from .errors import (
    AotiDeployError,
    CompileError,
    ExportError,
    InputError,
    ModelError,
    OpLibraryError,
    PackageError,
    VerificationError,
)

# The op layer imports torch; it loads on first use (PEP 562), so the CLIs' --help
# and the light modules (errors, locate) start without it.
_LAZY = {"identity_conv": ".ops", "load_op_library": ".ops"}

if TYPE_CHECKING:
    from .ops import identity_conv, load_op_library


_SUBPACKAGES = ("bench", "cli", "compiler", "models", "ops", "package", "runtime", "verify", "errors", "locate")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBPACKAGES)


__all__ = [
    "AotiDeployError",
    "CompileError",
    "ExportError",
    "InputError",
    "ModelError",
    "OpLibraryError",
    "PackageError",
    "VerificationError",
    "identity_conv",
    "load_op_library",
]
