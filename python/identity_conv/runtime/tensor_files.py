"""Tensor files shared by the Python and C++ runtimes: a list of tensors written
with torch.save (read in C++ with torch::pickle_load)."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from ..errors import IdentityConvError, InputError

_HINT = "Write it with torch.save([tensor, ...], path) or with a runner's --outputs."


def save_tensors(path: str | Path, tensors: list[torch.Tensor]) -> Path:
    """Write ``tensors`` (moved to the CPU) to ``path``; parent folders are created."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save([t.detach().cpu() for t in tensors], path)
    except (OSError, RuntimeError) as error:
        raise IdentityConvError(f"could not write tensors to {path}: {error}") from error
    return path


def load_tensors(path: str | Path) -> list[torch.Tensor]:
    """Read a list of tensors (a single tensor counts as a list of one).

    Raises:
        InputError: the file is missing, empty, unreadable, or holds something
            other than tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"tensor file not found: {path}\n{_HINT}")
    if path.stat().st_size == 0:
        raise InputError(f"tensor file is empty: {path}\n{_HINT}")
    try:
        value = torch.load(path, weights_only=True, map_location="cpu")
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(f"could not read tensor file {path}: {first_line}\n{_HINT}") from error
    if isinstance(value, torch.Tensor):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"tensor file {path} holds a {type(value).__name__}, expected a list of tensors.\n{_HINT}")
    for i, item in enumerate(value):
        if not isinstance(item, torch.Tensor):
            raise InputError(f"tensor file {path}: element {i} is of type {type(item).__name__}, expected a tensor.")
    return list(value)
