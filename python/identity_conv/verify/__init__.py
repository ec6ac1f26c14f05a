"""Verification: bit comparison and the verdict rule (bits.py), the parity matrix
(parity.py) and special values (special_values.py)."""

from .bits import BitReport, bit_view, compare_bits, compare_tensor_lists, list_verdict, ulp_distance

__all__ = ["BitReport", "bit_view", "compare_bits", "compare_tensor_lists", "list_verdict", "ulp_distance"]
