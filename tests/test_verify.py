"""compare_bits compares bit patterns, not float values, and reports precisely."""

from __future__ import annotations

import pytest
import torch

from aoti_deploy.errors import VerificationError
from aoti_deploy.verify.bits import compare_bits, compare_tensor_lists


def test_identical_tensors():
    x = torch.randn(3, 4)
    report = compare_bits(x.clone(), x)
    assert report.identical and report.num_differ == 0 and str(report) == "identical"


def test_negative_zero_differs_although_torch_equal_says_equal():
    actual, expected = torch.tensor([1.0, 0.0]), torch.tensor([1.0, -0.0])
    assert torch.equal(actual, expected)
    report = compare_bits(actual, expected)
    assert not report.identical
    assert report.num_differ == 1
    assert report.first_index == (1,)
    assert (report.actual_bits, report.expected_bits) == ("0x00000000", "0x80000000")
    assert report.max_abs_diff == 0.0


def test_nan_with_same_payload_is_identical_although_torch_equal_says_unequal():
    nan = torch.tensor([0x7FC00123], dtype=torch.int32).view(torch.float32)
    assert not torch.equal(nan, nan.clone())
    assert compare_bits(nan.clone(), nan).identical


def test_nan_payloads_that_differ_are_reported():
    a = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    b = torch.tensor([0x7FC00002], dtype=torch.int32).view(torch.float32)
    report = compare_bits(a, b)
    assert not report.identical
    assert "0x7fc00001" in str(report) and "0x7fc00002" in str(report) and "nan" in str(report)


def test_report_names_first_index_values_bits_and_max_abs_diff():
    expected = torch.zeros(2, 3, dtype=torch.float64)
    actual = expected.clone()
    actual[1, 0] = 0.5
    actual[1, 2] = -2.0
    report = compare_bits(actual, expected)
    assert report.num_differ == 2 and report.numel == 6
    assert report.first_index == (1, 0)
    assert report.actual_value == 0.5 and report.expected_value == 0.0
    assert report.actual_bits == "0x3fe0000000000000"
    assert report.max_abs_diff == 2.0
    assert str(report).startswith("2 of 6 elements differ; first at [1, 0]: got 0.5 (0x3fe0000000000000)")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_width_dtypes_compare_16_bit_patterns(dtype):
    a = torch.tensor([1.0, 2.0], dtype=dtype)
    b = torch.tensor([1.0, -2.0], dtype=dtype)
    report = compare_bits(a, b)
    assert report.num_differ == 1 and len(report.actual_bits) == len("0x4000")


def test_non_contiguous_inputs_compare_by_logical_element():
    x = torch.randn(4, 5)
    assert compare_bits(x.t(), x.t().contiguous()).identical


def test_dtype_and_shape_mismatches_are_reported():
    assert "dtype differs" in str(compare_bits(torch.zeros(2), torch.zeros(2, dtype=torch.float64)))
    assert "shape differs" in str(compare_bits(torch.zeros(2), torch.zeros(3)))


def test_list_length_mismatch_raises():
    with pytest.raises(VerificationError, match="got 1, expected 2"):
        compare_tensor_lists([torch.zeros(1)], [torch.zeros(1), torch.zeros(1)])
