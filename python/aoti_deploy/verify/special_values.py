"""Inputs made of the float values that break naive identity checks: NaN with
payloads (quiet and signalling, both signs), +-0, +-inf, subnormals and extremes."""

from __future__ import annotations

import torch

INT_TWIN = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}

# Per dtype: quiet NaN with payload, signalling NaN with payload, negative NaN, +0, -0,
# +inf, -inf, smallest and largest subnormal, 1.0, -max finite.
SPECIAL_BITS: dict[torch.dtype, list[int]] = {
    torch.float16: [0x7E01, 0x7C01, 0xFE3F, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x03FF, 0x3C00, 0xFBFF],
    torch.bfloat16: [0x7FC1, 0x7F81, 0xFFC5, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x007F, 0x3F80, 0xFF7F],
    torch.float32: [0x7FC00001, 0x7F800001, 0xFFC12345, 0x0, 0x80000000, 0x7F800000, 0xFF800000,
                    0x00000001, 0x007FFFFF, 0x3F800000, 0xFF7FFFFF],
    torch.float64: [0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8000000012345, 0x0, 0x8000000000000000,
                    0x7FF0000000000000, 0xFFF0000000000000, 0x1, 0x000FFFFFFFFFFFFF, 0x3FF0000000000000,
                    0xFFEFFFFFFFFFFFFF],
}


def special_values(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A CPU tensor of ``shape`` whose first elements are the special patterns
    (repeated to fill at least one tenth of it) and the rest random bits.

    Args:
        shape: the shape; needs room for the 11 patterns.
        dtype: float16, bfloat16, float32 or float64.
        seed: seed of the random bits.
    """
    twin = INT_TWIN[dtype]
    width = torch.finfo(dtype).bits
    patterns = [b - (1 << width) if b >= 1 << (width - 1) else b for b in SPECIAL_BITS[dtype]]
    numel = 1
    for size in shape:
        numel *= size
    if numel < len(patterns):
        raise ValueError(f"shape {list(shape)} has {numel} elements; special values need {len(patterns)}")
    generator = torch.Generator().manual_seed(seed)
    info = torch.iinfo(twin)
    bits = torch.randint(info.min, info.max, (numel,), generator=generator, dtype=twin)
    repeats = max(1, numel // (10 * len(patterns)))
    special = torch.tensor(patterns * repeats, dtype=twin)[:numel]
    bits[: special.numel()] = special
    return bits.view(dtype).reshape(shape)
