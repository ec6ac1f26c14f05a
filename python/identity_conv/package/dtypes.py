"""The dtype-name table of the package contract: dtypes are written with Python's
spelling ("float32", "complex64"), in the spec, in messages and in both runtimes.
cpp_runtime/core/dtypes.cpp holds the same table; tests/contract/dtypes.json pins
the two to each other."""

from __future__ import annotations

import torch

# Every dtype a spec may name. The C++ table maps the same names to c10 ScalarTypes.
NAMES = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
)

# The dtypes export_compile builds for and runners draw random inputs of.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (``torch.complex64`` -> ``"complex64"``)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype | None:
    """The dtype a spec names, or None for a name outside the table."""
    return getattr(torch, name) if name in NAMES else None
