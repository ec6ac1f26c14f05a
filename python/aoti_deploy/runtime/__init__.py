"""Running packages: the trust policy (trust.py), preflight (preflight.py), input
validation (validation.py), the --input-shape text (input_shape.py), random inputs
(random_inputs.py), tensor files (tensor_files.py), AOTI packages in this process
(aoti.py), ONNX files (onnx_runtime.py) and the C++ runner as a subprocess (cpp_runner.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

# Each name loads its module on first use (PEP 562): importing one submodule, e.g.
# runtime.trust, must not import torch through the others.
_LAZY = {
    "LoadedPackage": ".aoti",
    "load_package": ".aoti",
    "load_package_libraries": ".aoti",
    "to_package_device": ".aoti",
    "HostFacts": ".preflight",
    "check_required_symbols": ".preflight",
    "check_runs_here": ".preflight",
    "this_host": ".preflight",
    "make_random_inputs": ".random_inputs",
    "OpenedModel": ".trust",
    "TrustPolicy": ".trust",
    "open_model": ".trust",
    "trust_policy": ".trust",
    "InputDesc": ".validation",
    "check_inputs": ".validation",
    "validate_inputs": ".validation",
}


def is_onnx_path(path: str | os.PathLike[str]) -> bool:
    """Whether a model path goes to onnxruntime rather than AOTI: by its suffix, so
    no ONNX module (nor torch) is imported to tell a .pt2. compiler.onnx_export
    re-exports it."""
    return Path(path).suffix.lower() == ".onnx"


if TYPE_CHECKING:
    from .aoti import LoadedPackage, load_package, load_package_libraries, to_package_device
    from .preflight import HostFacts, check_required_symbols, check_runs_here, this_host
    from .random_inputs import make_random_inputs
    from .trust import OpenedModel, TrustPolicy, open_model, trust_policy
    from .validation import InputDesc, check_inputs, validate_inputs


_MODULES = ("aoti", "input_shape", "onnx_runtime", "preflight", "random_inputs", "tensor_files", "trust", "validation")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _MODULES)


__all__ = [
    "HostFacts",
    "InputDesc",
    "LoadedPackage",
    "OpenedModel",
    "TrustPolicy",
    "check_inputs",
    "check_required_symbols",
    "check_runs_here",
    "is_onnx_path",
    "load_package",
    "load_package_libraries",
    "make_random_inputs",
    "open_model",
    "this_host",
    "to_package_device",
    "trust_policy",
    "validate_inputs",
]
