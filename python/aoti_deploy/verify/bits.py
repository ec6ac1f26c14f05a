"""Bit-level comparison of tensors: bit patterns through same-width integer views,
never float equality (which calls -0.0 == +0.0 and NaN != NaN)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import InputError, VerificationError
from ..package.dtypes import dtype_name

_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class BitReport:
    """The result of ``compare_bits``. ``str(report)`` is the one-line summary."""

    identical: bool
    numel: int
    num_differ: int
    first_index: tuple[int, ...] | None = None
    actual_value: float | None = None
    expected_value: float | None = None
    actual_bits: str | None = None
    expected_bits: str | None = None
    max_abs_diff: float | None = None
    # Over elements where both are finite and the expected value is not zero.
    max_rel_diff: float | None = None
    # Largest distance in units in the last place (ULP): how many representable
    # values lie between the two. -0.0 and +0.0 are 0 apart; NaN against a number is
    # infinitely far, NaN against NaN 0 apart (whatever their payload bits).
    max_ulp: float | None = None
    reason: str | None = None  # set when dtype or shape differ

    def __str__(self) -> str:
        if self.identical:
            return "identical"
        if self.reason:
            return self.reason
        index = ", ".join(str(i) for i in self.first_index or ())
        return (
            f"{self.num_differ} of {self.numel} elements differ; first at [{index}]: "
            f"got {_fmt(self.actual_value)} ({self.actual_bits}), "
            f"expected {_fmt(self.expected_value)} ({self.expected_bits}); "
            f"max abs diff {_fmt(self.max_abs_diff)}, max rel diff {_fmt(self.max_rel_diff)}, "
            f"max ULP distance {_fmt_ulp(self.max_ulp)}"
        )


def _fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "nan" if value != value else f"{value:.9g}"


def _fmt_ulp(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "inf" if value == float("inf") else f"{int(value)}"


def ulp_distance(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Element-wise distance in ULP of two same-shape, same-dtype tensors, as float64.

    Floats are mapped to integers that are ordered like the values (-0.0 and +0.0
    both to 0), so the distance counts the representable values between them.
    Complex tensors count their real and imaginary parts apart (``as_real``).
    Integer and bool tensors get their absolute difference, taken in int64.
    """
    actual, expected = as_real(actual), as_real(expected)
    if not expected.dtype.is_floating_point:
        return (actual.detach().cpu().to(torch.int64) - expected.detach().cpu().to(torch.int64)).abs().flatten().double()
    width_bits = 8 * expected.element_size()
    sign_mask = (1 << (width_bits - 1)) - 1

    def ordered(tensor: torch.Tensor) -> torch.Tensor:
        bits = bit_view(tensor)
        if bits.dtype == torch.uint8:
            bits = bits.view(torch.int8)  # 1-byte floats: the sign bit must extend
        bits = bits.to(torch.int64)  # sign-extends narrower widths
        magnitude = bits & sign_mask
        return torch.where(bits < 0, -magnitude, magnitude)

    a, e = ordered(actual), ordered(expected)
    same_sign = (a >= 0) == (e >= 0)
    # Opposite signs: |a| + |e| can overflow int64 for float64, so add in float64
    # (such distances are astronomically large anyway).
    distance = torch.where(
        same_sign, (a - e).abs().to(torch.float64), a.abs().to(torch.float64) + e.abs().to(torch.float64)
    )
    a_nan = actual.detach().cpu().flatten().isnan()
    e_nan = expected.detach().cpu().flatten().isnan()
    distance = torch.where(a_nan & e_nan, torch.zeros_like(distance), distance)
    return torch.where(a_nan ^ e_nan, torch.full_like(distance, float("inf")), distance)


def as_real(tensor: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its (real, imaginary) parts (a trailing dim of 2), so every
    comparison sees both; any other tensor as it is."""
    if tensor.is_complex():
        return torch.view_as_real(tensor.detach().cpu().resolve_conj().resolve_neg().contiguous())
    return tensor


def bit_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as a flat tensor of same-width integers (on the CPU)."""
    # Lazy negation/conjugation bits are applied first: they change the values.
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    return tensor.view(_INT_OF_WIDTH[tensor.element_size()]).flatten()


def compare_bits(actual: torch.Tensor, expected: torch.Tensor) -> BitReport:
    """Compare two tensors bit for bit.

    Args:
        actual: the tensor under test.
        expected: the reference.

    Returns:
        A BitReport: identical, or the count of differing elements, the first
        differing index with both values and bit patterns, and the max absolute
        difference over elements where both values are finite.
    """
    numel = expected.numel()
    if actual.dtype != expected.dtype:
        return BitReport(
            False, numel, numel, reason=f"dtype differs: got {dtype_name(actual.dtype)}, expected {dtype_name(expected.dtype)}"
        )
    if actual.shape != expected.shape:
        return BitReport(
            False, numel, numel, reason=f"shape differs: got {list(actual.shape)}, expected {list(expected.shape)}"
        )
    # Complex numbers are compared as their real and imaginary parts.
    actual, expected = as_real(actual), as_real(expected)
    numel = expected.numel()
    if actual.element_size() not in _INT_OF_WIDTH:
        raise InputError(
            f"cannot compare bits of {actual.dtype}: elements of {actual.element_size()} bytes "
            f"have no integer twin (supported widths: 1, 2, 4, 8 bytes)"
        )
    actual_bits, expected_bits = bit_view(actual), bit_view(expected)
    differ = actual_bits != expected_bits
    num_differ = int(differ.sum())
    if num_differ == 0:
        return BitReport(True, numel, 0)
    flat = int(differ.nonzero()[0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(expected.shape)))
    a64 = actual.detach().cpu().resolve_neg().flatten().double()
    e64 = expected.detach().cpu().resolve_neg().flatten().double()
    finite = a64.isfinite() & e64.isfinite()
    abs_diff = torch.where(finite, (a64 - e64).abs(), torch.zeros_like(a64))
    max_abs = float(abs_diff.max())
    relative = finite & (e64 != 0)
    max_rel = float(torch.where(relative, abs_diff / e64.abs().clamp_min(torch.finfo(torch.float64).tiny), 0).max())
    max_ulp = float(ulp_distance(actual, expected).max())
    width = 2 * actual.element_size()
    mask = (1 << (8 * actual.element_size())) - 1
    return BitReport(
        identical=False,
        numel=numel,
        num_differ=num_differ,
        first_index=index,
        actual_value=float(a64[flat]),
        expected_value=float(e64[flat]),
        actual_bits=f"0x{int(actual_bits[flat]) & mask:0{width}x}",
        expected_bits=f"0x{int(expected_bits[flat]) & mask:0{width}x}",
        max_abs_diff=max_abs,
        max_rel_diff=max_rel,
        max_ulp=max_ulp,
    )


def compare_tensor_lists(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> list[BitReport]:
    """``compare_bits`` pairwise. A length mismatch is a VerificationError."""
    if len(actual) != len(expected):
        raise VerificationError(f"different numbers of tensors: got {len(actual)}, expected {len(expected)}")
    return [compare_bits(a, e) for a, e in zip(actual, expected)]
