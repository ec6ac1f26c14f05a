"""The compile cache: a key over everything that shapes a package, recorded in the
package's metadata, so export_compile can reuse a package at --output that was built
from the same inputs instead of exporting and compiling again."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import PackageError
from ..models.example import ModelExample
from ..package.archive import read_package_spec
from ..package.host import target_cpu_flags
from ..package.spec import PackageSpec
from .eager_check import recorded_checks
from .options import ExportOptions
from .speed import default_settings

_TOOLKIT_DIR = Path(__file__).resolve().parents[1]


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _package_files(module_name: str) -> set[Path]:
    """Every Python file of the top-level package that holds ``module_name`` (a
    forward may call helpers anywhere in it), or the module's own file."""
    top = sys.modules.get(module_name.split(".")[0])
    locations = list(getattr(top, "__path__", []) or [])
    if locations:
        return {path.resolve() for location in locations for path in Path(location).rglob("*.py")}
    file = getattr(sys.modules.get(module_name), "__file__", None)
    return {Path(file).resolve()} if file else set()


def _installed_record(module_name: str) -> str | None:
    """The RECORD of the installed distribution that holds ``module_name``'s top-level
    package, when that package lives in site-packages (not an editable or local
    checkout), else None. pip's RECORD lists every installed file with its sha256, so
    one small file stands for a large library's thousands (sympy: 1532 files, 0.6 s
    to hash here, on every cache lookup)."""
    top = module_name.split(".")[0]
    module = sys.modules.get(top)
    locations = list(getattr(module, "__path__", []) or []) or [getattr(module, "__file__", None) or ""]
    if not all({"site-packages", "dist-packages"} & set(Path(location).parts) for location in locations):
        return None
    for distribution in importlib.metadata.packages_distributions().get(top, []):
        record = importlib.metadata.distribution(distribution).read_text("RECORD")
        if record:
            return record
    return None


def _source_digests(model: nn.Module, modules: Iterable[str]) -> dict[str, str]:
    """Digests of the toolkit's own sources and of the packages that define the
    model's classes (its own and its submodules') and the given modules: each file's,
    or, for an installed distribution, its RECORD's."""
    files = set(_TOOLKIT_DIR.rglob("*.py"))
    digests = {}
    names = set(modules)
    for module in model.modules():
        names.add(type(module).__module__)
    for name in names:
        if name not in sys.modules or name.startswith("torch."):
            continue
        record = _installed_record(name)
        if record is None:
            files |= _package_files(name)
        else:
            digests[f"installed {name.split('.')[0]}"] = hashlib.sha256(record.encode()).hexdigest()
    return {**{str(path): _file_digest(path) for path in sorted(files)}, **digests}


def _tensor_digest(digest: "hashlib._Hash", name: str, tensor: torch.Tensor) -> None:
    tensor = tensor.detach().cpu().contiguous()
    digest.update(f"{name}:{tensor.dtype}:{list(tensor.shape)}".encode())
    digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")


def _values_digest(tensor: torch.Tensor) -> str:
    digest = hashlib.sha256()
    _tensor_digest(digest, "input", tensor)
    return digest.hexdigest()


def _state_digest(model: nn.Module) -> str:
    """Parameters, buffers (persistent or not), plain tensor attributes (export lifts
    them as constants), and the flattened state of torchbind objects."""
    digest = hashlib.sha256()
    for name, tensor in model.named_parameters():
        _tensor_digest(digest, f"param {name}", tensor)
    for name, tensor in model.named_buffers():
        _tensor_digest(digest, f"buffer {name}", tensor)
    for path, module in model.named_modules():
        for attribute, value in sorted(vars(module).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                _tensor_digest(digest, f"attribute {path}.{attribute}", value)
            elif isinstance(value, torch.ScriptObject):
                flat = value.__obj_flatten__() if hasattr(value, "__obj_flatten__") else repr(value)
                digest.update(f"{path}.{attribute}={flat!r}".encode())
    return digest.hexdigest()


def _compiler_identity() -> str:
    """The C++ compiler Inductor compiles with by default ($CXX, else g++), and its
    version. (Asking Inductor itself would import it: seconds on a cache hit.)"""
    compiler = os.environ.get("CXX") or "g++"
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as error:  # a missing compiler fails the compile later
        return f"{compiler}: unknown ({type(error).__name__})"
    return f"{compiler}: {version.splitlines()[0] if version else ''}"


def cache_key(
    model: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    traced_inputs: Sequence[torch.Tensor],
    library_paths: Iterable[str | Path],
    source_modules: Iterable[str],
    options: dict[str, object],
    cpu_flags: Sequence[str],
) -> str:
    """A hex digest of everything that affects a package.

    Args:
        model: the module to export (the sources of the packages that define its
            classes, and its state).
        example_inputs: shapes, dtypes, devices and values of the example inputs.
        traced_inputs: the inputs torch.export traces with.
        library_paths: op library files (their content, not their paths).
        source_modules: modules whose source counts too (the factory's, fake modules).
        options: the build options that change the compiled package (device, dtype,
            dynamic dims, optimize, ...), JSON-serialisable via str. Options that only
            change the check (--max-ulp) stay out: a hit re-decides the stored reports.
        cpu_flags: the flags the package needs of a host: the CPU target's, or for
            native the compile host's instruction-set flags (-march=native).

    Also counted: the torch version, the TORCHINDUCTOR_* and AOT_INDUCTOR_*
    environment variables (but cache locations) and the C++ compiler's version.
    """
    parts = {
        "format": 1,
        "torch": torch.__version__,
        "sources": _source_digests(model, source_modules),
        "state": _state_digest(model),
        # By content only: build/x.so, ./build/x.so and the default lookup are one file.
        "libraries": sorted(_file_digest(Path(path)) for path in library_paths),
        # Cache locations change no code (and Inductor sets TORCHINDUCTOR_CACHE_DIR itself).
        "environment": {
            k: v for k, v in os.environ.items() if k.startswith(("TORCHINDUCTOR_", "AOT_INDUCTOR_")) and "CACHE" not in k
        },
        "compiler": _compiler_identity(),
        # Values too: the package is verified (and --save-reference written) on them.
        "inputs": [[list(x.shape), str(x.dtype), str(x.device), _values_digest(x)] for x in example_inputs],
        "traced": [list(x.shape) for x in traced_inputs],
        "options": options,
        "cpu_flags": sorted(cpu_flags),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def build_cache_key(
    example: ModelExample, options: ExportOptions, libraries: list[Path], dynamic_shapes: Any
) -> str:
    """The compile-cache key of one export. The op libraries counted are those it
    loaded (the options', or the default one). The tolerance is not in the key: it
    changes the check, not the compiled code."""
    inputs = example.inputs
    speed = default_settings(options)
    key_options = {
        "device": options.device,
        **example.key,
        "dynamic": [str(d) for d in example.dynamic_dims],
        "optimize": options.optimize,
        **({"tune_budget": options.tune_budget} if options.optimize == "tune" else {}),
        "allow_python_ops": options.allow_python_ops,
        "fake_modules": list(options.fake_modules),
        "cpu_target": options.cpu_target,
        # A CPU package's thread count (0 otherwise): with freezing, oneDNN lays its
        # convolution weights out for it (docs/performance-real-models.md).
        "intra_op_threads": options.intra_op_threads(),
        # The call's structure with its Python scalars (baked in), and the API's
        # dynamic shapes. Version 2 of the spec's contents records names.
        "call": repr(example.call.with_tensors([None] * len(inputs))),
        "dynamic_shapes": repr(dynamic_shapes),
        "contents": 2,
        **({"inductor_configs": sorted(options.inductor_configs.items())} if options.inductor_configs else {}),
        # The speed settings the compile starts with (speed.py's defaults change the code).
        **({"speed": [[s.name, sorted(s.configs.items())] for s in speed]} if speed else {}),
        # Only when given, so the keys of packages built without it stay as they were.
        **({"input_values": sorted(options.input_values.items())} if options.input_values else {}),
        **({"precision": options.precision} if options.precision != "fp32" else {}),
        **({"quantize": options.quantize, "calibration": _calibration_digest(options.calibration)}
           if options.quantize else {}),
    }
    modules = list(options.fake_modules) + ([example.source_module] if example.source_module else [])
    return cache_key(example.model, inputs, example.traced, libraries, modules, key_options,
                     target_cpu_flags(options.cpu_target))


def _calibration_digest(calibration: Any) -> str:
    """The calibration calls' structure and every tensor's dtype, shape and bytes."""
    digest = hashlib.sha256()
    leaves, structure = torch.utils._pytree.tree_flatten(calibration)
    digest.update(repr(structure).encode())
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            tensor = leaf.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{tensor.dtype}{tuple(leaf.shape)}".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        else:
            digest.update(repr(leaf).encode())
    return digest.hexdigest()


def cached_spec(output: Path, key: str) -> PackageSpec | None:
    """The spec of the package at ``output`` if it was built (and verified) from the
    same inputs, else None."""
    if not output.is_file():
        return None
    try:
        spec = read_package_spec(output)
    except PackageError:
        return None
    if spec.cache_key != key or not spec.verified or spec.eager_check is None:
        return None
    try:
        recorded_checks(spec, spec.eager_check)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return spec
