"""The op my_ops::identity_conv_op: registration (opcheck), bit-exact copies for
every float dtype and special value, and clear errors for unsupported inputs."""

from __future__ import annotations

import pytest
import torch

from aoti_deploy.ops import identity_conv
from aoti_deploy.verify.special_values import INT_TWIN, SPECIAL_BITS
from aoti_deploy.verify.special_values import special_values as make_special_values
from conftest import requires_cuda

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def special_values(dtype: torch.dtype, device: str) -> torch.Tensor:
    """The special bit patterns plus random bits, as a [4, 3, 5, 7] tensor of dtype."""
    return make_special_values((4, 3, 5, 7), dtype).to(device)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    twin = INT_TWIN[expected.dtype]
    assert torch.equal(actual.cpu().contiguous().view(twin), expected.cpu().contiguous().view(twin))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_values_keep_their_bits(op_library, dtype, device):
    x = special_values(dtype, device)
    assert_same_bits(identity_conv(x), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize(
    "make_view",
    [
        pytest.param(lambda t: t.transpose(1, 3), id="transposed"),
        pytest.param(lambda t: t[:, :, ::2, 1::3], id="sliced-with-offset"),
        pytest.param(lambda t: t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), id="channels-last"),
        pytest.param(lambda t: t[:1].expand(3, -1, -1, -1), id="expanded-zero-stride"),
    ],
)
def test_any_strides_give_an_exact_contiguous_copy(op_library, dtype, device, make_view):
    x = make_view(special_values(dtype, device))
    assert not x.is_contiguous()
    y = identity_conv(x)
    assert y.is_contiguous()
    assert_same_bits(y, x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0,), (2, 0, 4), (0, 3, 8, 8)])
def test_zero_element_tensors(op_library, device, shape):
    x = torch.empty(shape, device=device)
    y = identity_conv(x)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device


def test_large_tensor_is_copied_exactly_in_parallel(op_library):
    # Above the 1 MB grain, so the parallel memcpy path really splits the work.
    x = torch.randn(3, 1024, 1024)
    assert_same_bits(identity_conv(x), x)


def test_output_does_not_alias_input(op_library):
    x = torch.randn(4, 4)
    y = identity_conv(x)
    assert y.data_ptr() != x.data_ptr()
    x.zero_()
    assert not torch.equal(y, x)


@pytest.mark.parametrize(
    "dtype, name",
    [(torch.int32, "Int"), (torch.int64, "Long"), (torch.uint8, "Byte"), (torch.bool, "Bool"),
     (torch.complex64, "ComplexFloat")],
)
def test_unsupported_dtypes_get_a_message_naming_the_dtype(op_library, dtype, name):
    with pytest.raises(RuntimeError, match=rf"expected a floating-point tensor .* got {name}\b"):
        identity_conv(torch.zeros(2, 3, dtype=dtype))


@pytest.mark.parametrize("to_sparse", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr], ids=["coo", "csr"])
def test_sparse_input_is_rejected_clearly(op_library, to_sparse):
    with pytest.raises(RuntimeError, match="expected a dense .strided. tensor, got layout Sparse"):
        identity_conv(to_sparse(torch.eye(3)))


def opcheck_samples(device: str) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    base = torch.randn(2, 3, 6, 5, generator=generator)
    samples = [base, base.transpose(2, 3), base[:, :, ::2], torch.empty(0, 3, 4, 4), torch.randn(7)]
    samples += [base.to(dtype) for dtype in FLOAT_DTYPES]
    return [s.to(device) for s in samples]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(op_library, device):
    for sample in opcheck_samples(device):
        torch.library.opcheck(torch.ops.my_ops.identity_conv_op.default, (sample,))


@requires_cuda
def test_cuda_kernel_runs_on_the_current_stream(op_library):
    expected = special_values(torch.float32, "cuda")
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        # The source is written late on the side stream: a kernel launched on any
        # other stream would copy the zeros, not these bits.
        source = torch.zeros_like(expected)
        torch.cuda._sleep(50_000_000)
        source.copy_(expected)
        y = identity_conv(source)
    stream.synchronize()
    assert_same_bits(y, expected)


@requires_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_cuda_grid_stride_loop_covers_large_tensors(op_library, dtype):
    # More elements than one pass of the capped grid (SMs * 8 blocks * 256 threads).
    x = torch.randn(17_000_000, device="cuda").to(dtype)
    assert_same_bits(identity_conv(x), x)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_values_input_holds_every_pattern(dtype):
    # Guards the generator the op and matrix tests rely on: each pattern is present.
    bits = set(make_special_values((4, 3, 5, 7), dtype).view(INT_TWIN[dtype]).flatten().tolist())
    width = torch.finfo(dtype).bits
    for pattern in SPECIAL_BITS[dtype]:
        assert (pattern - (1 << width) if pattern >= 1 << (width - 1) else pattern) in bits
