"""Running packages: the trust policy (trust.py), preflight (preflight.py), input
validation (validation.py), random inputs (random_inputs.py), tensor files
(tensor_files.py), AOTI packages in this process (aoti.py), ONNX files
(onnx_runtime.py) and the C++ runner as a subprocess (cpp_runner.py)."""

from .aoti import LoadedPackage, load_package, load_package_libraries, to_package_device
from .preflight import HostFacts, check_required_symbols, check_runs_here, this_host
from .random_inputs import make_random_inputs
from .trust import OpenedModel, TrustPolicy, open_model, trust_policy
from .validation import InputDesc, check_inputs, validate_inputs

__all__ = [
    "HostFacts",
    "InputDesc",
    "LoadedPackage",
    "OpenedModel",
    "TrustPolicy",
    "check_inputs",
    "check_required_symbols",
    "check_runs_here",
    "load_package",
    "load_package_libraries",
    "make_random_inputs",
    "open_model",
    "this_host",
    "to_package_device",
    "trust_policy",
    "validate_inputs",
]
