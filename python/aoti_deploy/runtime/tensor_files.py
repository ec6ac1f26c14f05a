"""Tensor files shared by the Python and C++ runtimes: a list of tensors written
with torch.save, or for a package with names a dict of name -> tensor (read in C++
with torch::pickle_load)."""

from __future__ import annotations

from typing import Any

import json
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from ..errors import AotiDeployError, InputError, PackageError, VerificationError
from ..package.zip_check import index_zip

_HINT = "Write it with torch.save([tensor, ...], path) or with a runner's --outputs."
# What a tensor file is; cpp_runtime/core/tensor_files.cpp says the same.
_FORMAT = "A tensor file is a list of tensors saved with torch.save([tensor, ...], path), or a runner's --outputs."
# torch's weights-only refusal buries its reason among advice to load unsafely.
_WEIGHTS_ONLY_REASON = re.compile(r"WeightsUnpickler error: (.*?)(?:\. Please use|$)", re.MULTILINE)


def _not_a_tensor_file(path: Path, why: str) -> InputError:
    return InputError(f"{path} is not a tensor file: {why}. {_FORMAT}")


def _load_failure(error: Exception) -> str:
    """Why torch.load refused a file, without torch's advice to retry with
    weights_only=False: that would run arbitrary code from the file."""
    text = str(error)
    found = _WEIGHTS_ONLY_REASON.search(text)
    if found:
        return f"it holds objects other than tensors ({found.group(1).strip()})"
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    if not first_line or "weights_only" in first_line:
        first_line = type(error).__name__
    return f"torch.load could not read it ({first_line})"


def save_tensors(path: str | Path, tensors: list[torch.Tensor], names: Sequence[str] = ()) -> Path:
    """Write ``tensors`` (moved to the CPU) to ``path``: a list, or given ``names``
    (one per tensor; ``PackageSpec.named_outputs`` for a package's outputs) a dict of
    name -> tensor in their order, as the C++ runner writes them. Parent folders are
    created."""
    path = Path(path)
    if names and len(names) != len(tensors):
        raise AotiDeployError(f"could not write tensors to {path}: {len(tensors)} tensor(s) for {len(names)} name(s)")
    cpu = [t.detach().cpu() for t in tensors]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(dict(zip(names, cpu)) if names else cpu, path)
    except (OSError, RuntimeError) as error:
        raise AotiDeployError(f"could not write tensors to {path}: {error}") from error
    return path


# The reference files an export writes for the runners' checks: the example inputs
# (--inputs), the package's outputs for them (--expected, bitwise runtime parity) and
# eager's (--eager-reference, under the recorded tolerance). The outputs are written
# as the runners write --outputs: by name when the model returns them by name.
REFERENCE_INPUTS = "inputs.pt"
REFERENCE_OUTPUTS = "expected.pt"
REFERENCE_EAGER = "eager.pt"
REFERENCE_FILES = (REFERENCE_INPUTS, REFERENCE_OUTPUTS, REFERENCE_EAGER)


def save_references(
    folder: Path, inputs: list[torch.Tensor], outputs: list[torch.Tensor], eager: list[torch.Tensor],
    output_names: Sequence[str] = (),
) -> None:
    """Write the three reference files into ``folder``: the inputs as a list, the
    outputs by ``output_names`` (``PackageSpec.named_outputs``) if given."""
    save_tensors(folder / REFERENCE_INPUTS, inputs)
    save_tensors(folder / REFERENCE_OUTPUTS, outputs, output_names)
    save_tensors(folder / REFERENCE_EAGER, eager, output_names if len(eager) == len(outputs) else ())


def load_tensors(path: str | Path, names: Sequence[str] = (), role: str = "input") -> list[torch.Tensor]:
    """Read a list of tensors (a single tensor counts as a list of one), or a dict of
    name -> tensor, returned in the order of ``names``: the package's recorded names of
    its ``role``s ("input" or "output"; ``tensor_names`` of the spec).

    Raises:
        InputError: the file is missing, empty, unreadable, or holds something
            other than tensors; or a dict for a package without names, or with a
            missing or unknown name (the message lists the expected names).
    """
    path = Path(path)
    value = _read_value(path)
    if isinstance(value, torch.Tensor):
        return _known_dtypes([value], path)
    if isinstance(value, dict):
        return _known_dtypes(_tensors_by_name(value, names, role, path), path)
    return _known_dtypes(_tensor_list(value, path), path)


def read_tensors(path: str | Path) -> tuple[list[str] | None, list[torch.Tensor]]:
    """A tensor file as it is stored: the names of a dict of name -> tensor, in the
    file's order (None for a list, or a single tensor), and the tensors.

    Raises:
        InputError: as ``load_tensors``.
    """
    path = Path(path)
    value = _read_value(path)
    if isinstance(value, torch.Tensor):
        return None, _known_dtypes([value], path)
    if isinstance(value, dict):
        keys = list(value)
        return keys, _known_dtypes(_tensors_by_name(value, keys, "tensor", path), path)
    return None, _known_dtypes(_tensor_list(value, path), path)


def read_calibration(path: str | Path) -> list[Any]:
    """The calibration calls in a tensor file: a list, each item one call's tensors: a
    tensor (a one-input model), a list or tuple of tensors (the positional args) or a
    dict of name -> tensor (keyword args), as torch.save([call, ...], FILE) writes them."""
    path = Path(path)
    value = _read_value(path)
    if not isinstance(value, (list, tuple)) or not value:
        raise InputError(f"calibration file {path}: expected a non-empty list of calls (torch.save([batch, ...], "
                         f"FILE)), got {type(value).__name__}{' (empty)' if isinstance(value, (list, tuple)) else ''}")
    for i, call in enumerate(value):
        items = call.values() if isinstance(call, dict) else call if isinstance(call, (list, tuple)) else [call]
        if not all(isinstance(item, torch.Tensor) for item in items):
            raise InputError(f"calibration file {path}: call {i} is not a tensor, a list of tensors or a dict of "
                             "name -> tensor")
    return list(value)


def _tensor_list(value: object, path: Path) -> list[torch.Tensor]:
    if not isinstance(value, (list, tuple)):
        raise InputError(f"tensor file {path} holds a {type(value).__name__}, expected a list of tensors.\n{_HINT}")
    for i, item in enumerate(value):
        if not isinstance(item, torch.Tensor):
            raise InputError(f"tensor file {path}: element {i} is of type {type(item).__name__}, expected a tensor.")
    return list(value)


def _read_value(path: Path) -> object:
    """What a checked tensor file holds, as torch.load returns it."""
    if not path.is_file():
        raise InputError(f"tensor file not found: {path}\n{_HINT}")
    if path.stat().st_size == 0:
        raise InputError(f"tensor file is empty: {path}\n{_HINT}")
    # torch.save writes a zip archive, the only format the C++ runner reads; anything
    # else (a text file, a numpy file) would reach the unpickler and fail obscurely.
    with path.open("rb") as file:
        if file.read(2) != b"PK":
            raise _not_a_tensor_file(path, "it is not a zip archive, the format torch.save writes")
    # The zip structure first: torch's reader trusts it. torch.load then checks each
    # storage record against the size its pickle declares.
    try:
        index_zip(path, "it")
    except PackageError as error:
        raise _not_a_tensor_file(path, str(error).removesuffix(".")) from None
    try:
        value = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # the unpickler raises many types on a foreign archive
        raise _not_a_tensor_file(path, _load_failure(error)) from error
    return value


def _known_dtypes(tensors: list[torch.Tensor], path: Path) -> list[torch.Tensor]:
    """Refuse a dtype no package takes or returns (e.g. torch's uint1..uint7 bit
    types, which most kernels, even a copy, do not implement), as the C++ reader does."""
    from ..package.dtypes import NAMES

    known = {getattr(torch, name) for name in NAMES if hasattr(torch, name)}
    for i, tensor in enumerate(tensors):
        if tensor.dtype not in known:
            raise InputError(f"tensor file {path}: tensor {i} has dtype {tensor.dtype}, which no package takes or "
                             f"returns.\n{_HINT}")
    return tensors


def _shown_keys(keys: Sequence[str]) -> str:
    """Names read from a file, for messages: each quoted and cut at 80 characters, the
    first eight of them (as cpp_runtime/core/tensor_files.cpp's shown_keys)."""
    shown = []
    for key in keys[:8]:
        text = json.dumps(key, ensure_ascii=False)
        shown.append(text[:80] + "..." if len(text) > 80 else text)
    if len(keys) > 8:
        shown.append(f"and {len(keys) - 8} more")
    return ", ".join(shown)


def _tensors_by_name(value: dict, names: Sequence[str], role: str, path: Path) -> list[torch.Tensor]:
    """A dict of name -> tensor in the order of ``names``. Worded as
    cpp_runtime/core/tensor_files.cpp's tensors_by_name."""
    for key, item in value.items():
        if not isinstance(key, str):
            raise InputError(
                f"tensor file {path} holds a dict with a key of type {type(key).__name__}; the keys of a tensor "
                "file's dict are tensor names (strings)."
            )
        if not isinstance(item, torch.Tensor):
            raise InputError(
                f"tensor file {path}: the entry {_shown_keys([key])} is of type {type(item).__name__}, expected a tensor."
            )
    keys = list(value)
    if not names:
        raise InputError(
            f"tensor file {path} holds tensors by name ({_shown_keys(keys)}), but the package records no {role} "
            f"names.\nWrite a list in the package's {role} order with torch.save([tensor, ...], path)."
        )
    missing = [name for name in names if name not in value]
    unknown = [key for key in keys if key not in names]
    if missing or unknown:
        problems = ([f"missing {role}(s) {', '.join(missing)}"] if missing else []) + (
            [f"unknown name(s) {_shown_keys(unknown)}"] if unknown else []
        )
        raise InputError(
            f"tensor file {path}: {'; '.join(problems)}. The package's {role}s are {', '.join(names)}: save a dict "
            "with exactly these names, or a list in this order."
        )
    return [value[name] for name in names]


def paired_tensors(actual: str | Path, expected: str | Path) -> tuple[str, list[str], list[torch.Tensor], list[torch.Tensor]]:
    """Two tensor files' tensors, paired for a comparison: by name when both hold
    dicts (the same names), else by position (the same count). A dict against a list
    (a runner's --outputs by name against a list of the same outputs) pairs the dict
    in its file order, which is the package's output order where a runner or an export
    wrote it, and is labelled by the dict's names.

    Returns:
        How they were paired, as the report says it ("by name", "by position", or
        for a dict against a list "by position (A by name, in its order; B a list)"),
        a label for each pair (the name, or ``tensor[i]``), and the two files'
        tensors in pair order.

    Raises:
        VerificationError: other names, or another count.
        InputError: a file ``read_tensors`` refuses.
    """
    actual_names, actual_tensors = read_tensors(actual)
    expected_names, expected_tensors = read_tensors(expected)
    if actual_names is not None and expected_names is not None:
        if set(actual_names) != set(expected_names):
            only_actual = [n for n in actual_names if n not in expected_names]
            only_expected = [n for n in expected_names if n not in actual_names]
            raise VerificationError(f"the two files name other tensors: only in {actual}: {only_actual or 'none'}; "
                                    f"only in {expected}: {only_expected or 'none'}")
        by_name = dict(zip(expected_names, expected_tensors))
        return "by name", list(actual_names), actual_tensors, [by_name[name] for name in actual_names]
    if len(actual_tensors) != len(expected_tensors):
        raise VerificationError(
            f"different numbers of tensors: {actual} holds {len(actual_tensors)}, {expected} holds "
            f"{len(expected_tensors)}"
        )
    names = actual_names or expected_names
    if names is not None:
        named, listed = (actual, expected) if actual_names is not None else (expected, actual)
        return (f"by position ({named} by name, in its order; {listed} a list)", list(names), actual_tensors,
                expected_tensors)
    return "by position", [f"tensor[{i}]" for i in range(len(actual_tensors))], actual_tensors, expected_tensors
