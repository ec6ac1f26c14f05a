"""The op layer's Python side: loading op libraries (loader.py) and the fakes,
wrappers and autograd formula of the project's ops (fakes.py)."""

from .fakes import FakeIdentityConvClass, identity_conv, identity_conv_out
from ..locate import LIBRARY_ENV_VAR
from .loader import LIBRARY_NAME, libraries_for, load_op_libraries, load_op_library

__all__ = [
    "FakeIdentityConvClass",
    "LIBRARY_ENV_VAR",
    "LIBRARY_NAME",
    "identity_conv",
    "identity_conv_out",
    "libraries_for",
    "load_op_libraries",
    "load_op_library",
]
