"""Export a PyTorch model with custom C++/CUDA ops, compile it with AOTInductor,
and run it from Python or from a C++ binary with no Python, verified bit-for-bit."""

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
from .ops import identity_conv, load_op_library

_moved.install()

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
