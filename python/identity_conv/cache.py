"""The compile cache: a key over everything that shapes a package, recorded in the
package's metadata, so export_compile can reuse a package at --output that was built
from the same inputs instead of exporting and compiling again."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn

_TOOLKIT_DIR = Path(__file__).resolve().parent


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_files(model: nn.Module, modules: Iterable[str]) -> list[Path]:
    """The toolkit's own sources, the files that define the model's classes (its
    own and its submodules'), and the given modules' files."""
    files = set(_TOOLKIT_DIR.rglob("*.py"))
    for module in model.modules():
        try:
            source = inspect.getsourcefile(type(module))
        except TypeError:  # a class with no Python source (e.g. built in)
            continue
        if source:
            files.add(Path(source).resolve())
    for name in modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            files.add(Path(file).resolve())
    return sorted(files)


def _state_digest(model: nn.Module) -> str:
    """Parameters and buffers (names, dtypes, shapes, bytes), plus the flattened state
    of torchbind objects the model holds."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict(keep_vars=False).items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{list(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    for path, module in model.named_modules():
        for attribute, value in sorted(vars(module).items()):
            if isinstance(value, torch.ScriptObject):
                flat = value.__obj_flatten__() if hasattr(value, "__obj_flatten__") else repr(value)
                digest.update(f"{path}.{attribute}={flat!r}".encode())
    return digest.hexdigest()


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
        model: the module to export (its class sources and its state).
        example_inputs: shapes, dtypes and devices of the example inputs.
        traced_inputs: the inputs torch.export traces with.
        library_paths: op library files (their content).
        source_modules: modules whose source counts too (the factory's, fake modules).
        options: the build options that change the package or its verification
            (device, dtype, dynamic dims, optimize, ...), JSON-serialisable via str.
        cpu_flags: the compile host's instruction-set flags (AOTI uses -march=native).
    """
    parts = {
        "format": 1,
        "torch": torch.__version__,
        "sources": {str(path): _file_digest(path) for path in _source_files(model, source_modules)},
        "state": _state_digest(model),
        "libraries": {Path(path).name: _file_digest(Path(path)) for path in sorted(map(str, library_paths))},
        "inputs": [[list(x.shape), str(x.dtype), str(x.device)] for x in example_inputs],
        "traced": [list(x.shape) for x in traced_inputs],
        "options": options,
        "cpu_flags": sorted(cpu_flags),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
