"""The package spec's vocabulary: its metadata key and schema versions, and the value
types a spec document holds (dims, value ranges, tensors, ops, the tolerance of the
eager check), with how each is written back. spec.py holds the document itself."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import PackageError

SPEC_KEY = "aoti_deploy.spec"
# The newest schema this toolkit reads. A writer records the lowest version whose
# readers understand the document, so older toolkits keep reading what they can: 2,
# or 3 when a dim is unbounded ("max": null), which a version-2 reader cannot read.
SCHEMA_VERSION = 3
UNBOUNDED_SCHEMA_VERSION = 3
# Before the JSON document: one metadata entry per field, "aoti_deploy.<field>".
LEGACY_PREFIX = "aoti_deploy."
# The largest integer a spec holds (JSON integers past it do not fit the C++ runner).
# As a dim's max it reads as unbounded: version-2 writers recorded torch.export's int_oo so.
INT64_MAX = 2**63 - 1
_REEXPORT = "Re-export the package with export_compile."




class SpecError(PackageError):
    """The spec is missing (kind "missing"), malformed ("malformed"), or of a schema
    version this toolkit cannot read ("unsupported_version")."""


# The rules a comparison can be held to (verify/tolerance.py compares under them).
BITWISE = "bitwise"
ULP = "ulp"
CLOSE = "close"
RULES = (BITWISE, ULP, CLOSE)


@dataclass(frozen=True)
class Tolerance:
    """``rule`` is BITWISE, ULP (every element within ``max_ulp`` ULP) or CLOSE
    (``rtol``/``atol``; None for both means torch.testing's default for each
    tensor's dtype)."""

    rule: str = BITWISE
    max_ulp: int = 0
    rtol: float | None = None
    atol: float | None = None

    @property
    def is_default_close(self) -> bool:
        return self.rule == CLOSE and self.rtol is None

    def resolve(self, dtype: torch.dtype) -> tuple[float, float]:
        """(rtol, atol) for a tensor of ``dtype`` under the CLOSE rule."""
        if self.rtol is not None and self.atol is not None:
            return self.rtol, self.atol
        from torch.testing._comparison import default_tolerances

        return default_tolerances(dtype)

    def describe(self, dtype: torch.dtype | None = None) -> str:
        """The rule in a few words, e.g. "bitwise", "within 4 ULP", "rtol 1.3e-06,
        atol 1e-05" (for ``dtype``), or "torch.testing's rtol/atol for each dtype"."""
        if self.rule == BITWISE:
            return "bitwise"
        if self.rule == ULP:
            return f"within {self.max_ulp} ULP"
        if dtype is None and self.is_default_close:
            return "torch.testing's rtol/atol for each dtype"
        rtol, atol = self.resolve(dtype if dtype is not None else torch.float32)
        return f"rtol {fmt(rtol)}, atol {fmt(atol)}"

    def to_document(self) -> dict[str, Any]:
        """The spec's ``eager_check`` entry."""
        return {"rule": self.rule, "max_ulp": self.max_ulp, "rtol": self.rtol, "atol": self.atol}


def fmt(value: float | None) -> str:
    """printf %.9g, as the C++ runner prints numbers."""
    if value is None:
        return "n/a"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.9g}"


@dataclass(frozen=True)
class DimSpec:
    """A fixed size (min == max), an inclusive range of sizes, or min and up (max
    None: unbounded, ``"max": null`` in the document)."""

    min: int
    max: int | None

    @property
    def is_static(self) -> bool:
        return self.min == self.max

    @property
    def is_unbounded(self) -> bool:
        return self.max is None

    def contains(self, size: int) -> bool:
        return self.min <= size and (self.max is None or size <= self.max)

    def wanted(self) -> str:
        """What a size must be, for messages: "3", "a size in [1, 8]" or "a size >= 1"."""
        if self.is_static:
            return str(self.min)
        if self.max is None:
            return f"a size >= {self.min}"
        return f"a size in [{self.min}, {self.max}]"

    def __str__(self) -> str:
        if self.is_static:
            return str(self.min)
        return f"{self.min}..{'unbounded' if self.max is None else self.max}"


# The integer dtypes a value range may apply to, and the values each holds.
VALUE_DTYPES: dict[str, tuple[int, int]] = {
    "uint8": (0, 2**8 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class ValueRange:
    """The values an integer input may hold, inclusive: where it indexes a tensor,
    any other value makes the compiled kernel abort the process. ``why`` says what
    it indexes (e.g. "embedding rows 0..999"), for messages."""

    min: int
    max: int
    why: str = ""

    def __str__(self) -> str:
        return f"[{self.min}, {self.max}]"

    def to_document(self) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "why": self.why}


# What an output is: a tensor, or a Python scalar the model returns (a SymInt, SymFloat
# or SymBool, or a constant). Every runtime carries a scalar as a 0-d tensor of its
# kind's dtype (Python's own widths): the Python API hands back the Python value, the
# C++ runner writes the 0-d tensor, Triton answers with a one-element tensor.
TENSOR_KIND = "tensor"
SCALAR_DTYPES: dict[str, str] = {"int": "int64", "float": "float64", "bool": "bool"}
OUTPUT_KINDS = (TENSOR_KIND, *SCALAR_DTYPES)


# What a tensor's name may be: an identifier, dots allowed after the first character
# (e.g. "input_ids", "encoder.last_hidden_state"), at most TENSOR_NAME_LIMIT characters.
TENSOR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
TENSOR_NAME_LIMIT = 128


@dataclass(frozen=True)
class TensorSpec:
    dims: tuple[DimSpec, ...]
    dtype: str
    # Inputs only, and only when export saw (or was told) which values index a tensor.
    values: ValueRange | None = None
    # The model's own name for it (e.g. "input_ids", "logits"); "" in packages from
    # before names were recorded.
    name: str = ""
    # Outputs only: TENSOR_KIND, or the Python scalar the model returns there ("int",
    # "float", "bool"; dims () and dtype SCALAR_DTYPES[kind]).
    kind: str = TENSOR_KIND

    @property
    def is_scalar(self) -> bool:
        return self.kind != TENSOR_KIND

    def shape_str(self) -> str:
        return "[" + ", ".join(str(d) for d in self.dims) + "]"

    def to_document(self) -> dict[str, Any]:
        """An ``inputs`` or ``outputs`` item of the spec document."""
        document: dict[str, Any] = {"dtype": self.dtype, "dims": [{"min": d.min, "max": d.max} for d in self.dims]}
        if self.values is not None:  # written only when recorded: older packages have none
            document["values"] = self.values.to_document()
        if self.name:  # written only when recorded: older readers ignore it
            document["name"] = self.name
        if self.is_scalar:  # written only for a scalar: older readers see a 0-d tensor
            document["kind"] = self.kind
        return document

    def describe(self) -> str:
        """What inspect shows of it: "[1..8, 3] float32", or for a scalar output
        "int (a 0-d int64 tensor)"."""
        if self.is_scalar:
            return f"{self.kind} (a 0-d {self.dtype} tensor)"
        return f"{self.shape_str()} {self.dtype}"


def tensor_label(role: str, index: int, specs: list[TensorSpec]) -> str:
    """How messages name a tensor: "input[0]", or "input[0] (input_ids)" when the
    package records names. cpp_runtime/core/package_spec.cpp's tensor_label is the same."""
    name = specs[index].name if index < len(specs) else ""
    return f"{role}[{index}]" + (f" ({name})" if name else "")


def tensor_names(specs: list[TensorSpec]) -> list[str]:
    """The recorded names of ``specs`` in order, or [] when they have none."""
    return [spec.name for spec in specs] if specs and specs[0].name else []


@dataclass(frozen=True)
class OpRef:
    """A custom op the package calls: ``ns::name`` and its overload ("default" for
    the unnamed one). ``overload`` is None for packages from before overloads were
    recorded: any overload of the name then satisfies the check."""

    name: str
    overload: str | None = "default"

    def __str__(self) -> str:
        return self.name if self.overload in (None, "default") else f"{self.name}.{self.overload}"


def malformed(detail: str) -> SpecError:
    """The error for a spec document (or legacy entry) that breaks the grammar."""
    return SpecError(f"package metadata is malformed: {detail}. {_REEXPORT}", kind="malformed")
