"""bf16 packages (``precision="bf16"``): the model's weights and compute in bfloat16,
its inputs and outputs as the fp32 model's. A copy of the model is converted to
bfloat16 and wrapped so that floating inputs are cast to bfloat16 on the way in, and
floating outputs back to float32 on the way out; the package is checked against that
bf16 model in eager, and records its drift from fp32.

Offered only on a host with AVX512-BF16 or AMX-BF16, where oneDNN computes in
bfloat16 natively; the package records the flag, so the runners refuse a host
without it, as for any instruction set."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..errors import InputError
from ..package.host import host_cpu_flags

PRECISIONS = ("fp32", "bf16")
# The host flags that make bfloat16 native, in the order the package records one.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


class BF16Model(nn.Module):
    """``model`` in bfloat16, called and returning as the fp32 model."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = copy.deepcopy(model).to(torch.bfloat16)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = pytree.tree_map_only(torch.Tensor, _to(torch.float32, torch.bfloat16), (args, kwargs))
        return pytree.tree_map_only(torch.Tensor, _to(torch.bfloat16, torch.float32), self.model(*args, **kwargs))


def _to(source: torch.dtype, target: torch.dtype) -> Any:
    return lambda tensor: tensor.to(target) if tensor.dtype == source else tensor


def bf16_flag(host_flags: set[str] | None = None) -> str:
    """The bf16 flag this host has, to record in the package; InputError if none."""
    flags = host_cpu_flags() if host_flags is None else host_flags
    found = next((flag for flag in BF16_FLAGS if flag in flags), None)
    if found is None:
        raise InputError(
            "precision='bf16' needs a CPU that computes bfloat16 natively (AVX512-BF16 or AMX-BF16), and this host "
            "has neither: export in fp32, or with quantize='int8'"
        )
    return found
