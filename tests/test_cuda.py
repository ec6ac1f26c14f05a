"""CUDA end to end: the class on CUDA tensors, an AOTI package compiled for
--device cuda, and both runners on it, bit-exact. Skipped with "needs a CUDA device"
where there is none; scripts/gpu_check.sh runs them on a GPU machine."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from conftest import run_both_runtimes
from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.verify.special_values import INT_TWIN, special_values

pytestmark = pytest.mark.cuda

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.fixture(scope="module")
def cuda_package(tmp_path_factory, op_library):
    out = tmp_path_factory.mktemp("cuda") / "model_cuda.pt2"
    result = CliRunner().invoke(export_compile_app, ["--device", "cuda", "--batch", "2", "--height", "8",
                                                     "--width", "12", "--output", str(out), "--op-lib", str(op_library)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "transposed"])
def test_class_forward_on_cuda_keeps_bits(op_library, dtype, contiguous):
    layer = torch.classes.my_ops.IdentityConvClass(5)
    x = special_values((2, 5, 6, 7), dtype).cuda()
    if not contiguous:
        x = x.transpose(2, 3)
    y = layer.forward(x)
    assert y.device == x.device and y.is_contiguous()
    twin = INT_TWIN[dtype]
    assert torch.equal(y.cpu().view(twin), x.cpu().contiguous().view(twin))


def test_cuda_package_records_its_device(cuda_package):
    from aoti_deploy.package.archive import read_package_spec

    assert read_package_spec(cuda_package).device == "cuda"


def test_both_runners_on_cuda_are_bit_exact(build, op_library, cuda_package, tmp_path):
    x = torch.randn(2, 3, 8, 12)
    py_out, cpp_out = run_both_runtimes(build, op_library, cuda_package, x, tmp_path)
    assert torch.equal(py_out.view(torch.int32), cpp_out.view(torch.int32))
    assert torch.equal(cpp_out.view(torch.int32), x.view(torch.int32))
