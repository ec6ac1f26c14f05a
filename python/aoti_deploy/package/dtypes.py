"""The dtype-name table of the package contract: dtypes are written with Python's
spelling ("float32", "complex64"), in the spec, in messages and in both runtimes, and
each has Triton's data type for its tensors ("FP32"), or none. cpp_runtime/core/dtypes.cpp
holds the same table; tests/contract/dtypes.json pins the two to each other."""

from __future__ import annotations

import torch

# Every dtype a spec may name, and Triton's data type for it (the inference protocol's
# spelling; config.pbtxt writes TYPE_ + it). Triton has no complex or float8 type, so
# such tensors cannot be served. The C++ table maps the same names to c10 ScalarTypes.
_TABLE: tuple[tuple[str, str | None], ...] = (
    ("bool", "BOOL"), ("uint8", "UINT8"), ("int8", "INT8"), ("int16", "INT16"), ("int32", "INT32"),
    ("int64", "INT64"), ("uint16", "UINT16"), ("uint32", "UINT32"), ("uint64", "UINT64"),
    ("float16", "FP16"), ("bfloat16", "BF16"), ("float32", "FP32"), ("float64", "FP64"),
    ("complex32", None), ("complex64", None), ("complex128", None),
    ("float8_e4m3fn", None), ("float8_e5m2", None), ("float8_e4m3fnuz", None), ("float8_e5m2fnuz", None),
)
NAMES = tuple(name for name, _ in _TABLE)
# Spec dtype -> Triton data type, for the dtypes Triton serves (in table order).
TRITON_TYPES: dict[str, str] = {name: triton for name, triton in _TABLE if triton is not None}

# The dtypes export_compile builds for and runners draw random inputs of.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}

# Integer and bool dtypes, whose random values (a runner's random inputs, export_compile's
# example inputs of a --model with --dtype of one of them) are uniform integers in a
# value range: the one recorded for an input that indexes a tensor, else
# DEFAULT_RANDOM_VALUES. The table's integer dtypes, in table order.
INTEGER_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
}
# The dtypes export_compile --dtype takes for a --model's inputs besides DTYPES (the
# model keeps its own dtype then). AOTInductor also takes uint16/32/64 inputs, but
# eager torch runs few ops on them, so the eager check could not run.
INPUT_DTYPES: dict[str, torch.dtype] = {
    name: INTEGER_DTYPES[name] for name in ("bool", "uint8", "int8", "int16", "int32", "int64")
}
# Inclusive (min, max) of a random integer or bool input without a recorded value
# range: 0 and 1 are what every attention mask, flag and index into a table of two or
# more rows accepts, so a random input cannot abort a kernel that indexes with it in
# a way export could not follow. cpp_runtime/core/random_inputs.cpp holds the same.
DEFAULT_RANDOM_VALUES = (0, 1)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (``torch.complex64`` -> ``"complex64"``)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype | None:
    """The dtype a spec names, or None for a name outside the table."""
    return getattr(torch, name) if name in NAMES else None
