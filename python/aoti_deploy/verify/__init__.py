"""Verification: bit comparison (bits.py), the rules a comparison is held to and
their verdict (tolerance.py), the parity matrix (parity.py) and special values
(special_values.py)."""

from .bits import BitReport, bit_view, compare_bits, compare_tensor_lists, ulp_distance
from .tolerance import Comparison, Tolerance, compare, list_verdict, verdict_line

__all__ = [
    "BitReport", "Comparison", "Tolerance", "bit_view", "compare", "compare_bits", "compare_tensor_lists",
    "list_verdict", "ulp_distance", "verdict_line",
]
