"""The four-layer IdentityModel: native depthwise 1x1 conv, the torchbind class,
the custom op, native conv again. Every layer is an identity, so output bits equal
input bits (except -0.0, which the native convs turn into +0.0)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..ops.loader import load_op_library


def _identity_depthwise_conv(channels: int) -> nn.Conv2d:
    conv = nn.Conv2d(channels, channels, kernel_size=1, groups=channels, bias=False)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    return conv


# The torchbind class every IdentityModel holds (layer 2).
IDENTITY_CLASS = "my_ops::IdentityConvClass"


class IdentityModel(nn.Module):
    """conv(1x1, depthwise, weight 1) -> IdentityConvClass -> identity_conv_op -> conv."""

    # Runners check output bits == input bits only for models that declare this.
    is_identity = True
    # The custom ops forward calls (besides IDENTITY_CLASS), for a clear error when
    # the library that defines them is not loaded.
    custom_ops = ("my_ops::identity_conv_op",)

    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        load_op_library()
        self.layer1 = _identity_depthwise_conv(channels)
        self.layer2 = torch.classes.my_ops.IdentityConvClass(channels)
        self.layer4 = _identity_depthwise_conv(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer1(x)
        x = self.layer2.forward(x)
        x = torch.ops.my_ops.identity_conv_op(x)
        return self.layer4(x)

    def named_layers(self) -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor], bool]]:
        """The layers of forward, in order, as (name, callable, is_custom), so a
        report can say which layer changed which values."""
        return [
            ("layer1 (native depthwise conv)", self.layer1, False),
            ("layer2 (IdentityConvClass)", self.layer2.forward, True),
            ("layer3 (identity_conv_op)", torch.ops.my_ops.identity_conv_op, True),
            ("layer4 (native depthwise conv)", self.layer4, False),
        ]


class IdentityOutModel(IdentityModel):
    """The IdentityModel with layer3 through the mutable out= variant: allocate the
    output, then let ``my_ops::identity_conv_op_out`` write it."""

    custom_ops = ("my_ops::identity_conv_op_out",)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer1(x)
        x = self.layer2.forward(x)
        out = torch.empty_like(x)
        torch.ops.my_ops.identity_conv_op_out(x, out)
        return self.layer4(out)

    def named_layers(self) -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor], bool]]:
        layers = super().named_layers()
        layers[2] = ("layer3 (identity_conv_op_out)", _call_out_variant, True)
        return layers


def _call_out_variant(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    torch.ops.my_ops.identity_conv_op_out(x, out)
    return out


MODEL_VARIANTS: dict[str, type[IdentityModel]] = {"functional": IdentityModel, "out": IdentityOutModel}
