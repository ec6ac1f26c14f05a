"""The package run from Python on torch's C++ package loader (run_inference): bit-identical to its input,
and inputs checked against the package's spec before anything runs."""

from __future__ import annotations

import pytest
import torch

from aoti_deploy.errors import InputError, PackageError
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.runtime.aoti import load_package
from aoti_deploy.verify.bits import compare_bits


@pytest.fixture(scope="module")
def package(compiled_package):
    return load_package(compiled_package.path, read_package_spec(compiled_package.path))


def test_package_output_is_bit_identical_to_its_input(package, compiled_package):
    (x,) = compiled_package.inputs
    (y,) = package.run([x])
    assert compare_bits(y, x).identical


def test_non_contiguous_input_is_made_contiguous_and_stays_correct(package):
    x = torch.randn(2, 3, 12, 8).transpose(2, 3)
    assert not x.is_contiguous()
    (y,) = package.run([x])
    assert compare_bits(y, x.contiguous()).identical


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.randn(2, 3, 8), r"input\[0\] \(x\): expected rank 4 \[2, 3, 8, 12\], got rank 3"),
        (torch.randn(1, 3, 8, 12), r"input\[0\] \(x\): dim 0 expected 2, got 1"),
        (torch.randn(2, 3, 4, 12), r"input\[0\] \(x\): dim 2 expected 8, got 4"),
        (torch.randn(2, 3, 8, 12, dtype=torch.float64), r"expected dtype float32, got float64"),
        (torch.randn(2, 3, 8, 12).half(), r"expected dtype float32, got float16"),
    ],
)
def test_bad_inputs_are_rejected_with_a_message(package, bad, message):
    with pytest.raises(InputError, match=message):
        package.run([bad])


def test_wrong_number_of_inputs(package):
    with pytest.raises(InputError, match="expects 1, got 2"):
        package.run([torch.randn(2, 3, 8, 12)] * 2)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "package is empty"),
        (b"not a zip at all", "not a zip archive"),
    ],
)
def test_broken_package_files(tmp_path, content, message):
    path = tmp_path / "broken.pt2"
    path.write_bytes(content)
    with pytest.raises(PackageError, match=message):
        read_package_spec(path)


def test_missing_package(tmp_path):
    with pytest.raises(PackageError, match="package not found"):
        read_package_spec(tmp_path / "absent.pt2")


def test_instruction_set_flags_keep_isa_flags_only():
    from aoti_deploy.package.host import instruction_set_flags, missing_cpu_flags

    x86 = {"fpu", "sse2", "avx2", "avx512f", "avx512_vnni", "amx_tile", "hypervisor", "tsc", "fma", "lm"}
    assert instruction_set_flags(x86) == ["amx_tile", "avx2", "avx512_vnni", "avx512f", "fma", "sse2"]
    arm = {"fp", "asimd", "sve", "bf16"}
    assert instruction_set_flags(arm) == ["asimd", "bf16", "fp", "sve"]
    assert missing_cpu_flags(["avx2", "avx512f"], {"avx2"}) == ["avx512f"]
