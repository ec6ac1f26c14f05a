"""Dynamic dims that say what to do: torch.export's constraint failures come back as the
range that works, why, and the --dynamic-dim to pass; a dim the model reads at a
dynamic size but that was left static (BERT's attention mask) is refused with the
option to add, where torch.export accepts it silently. Exports only, no compile."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from conftest import REPO_ROOT, _export
from aoti_deploy.compiler.dynamic_dims import DimFix, dynamic_dim_option, untied_static_dims
from aoti_deploy.compiler.export import export_model
from aoti_deploy.errors import ExportError
from aoti_deploy.models.user import DynamicDim

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


class Strided(nn.Module):
    """Three padded stride-2 convs, then batch norm: a height of 8 or less becomes 1."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.Sequential(*[nn.Conv2d(3 if i == 0 else 8, 8, 3, stride=2, padding=1) for i in range(3)])
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.convs(x)).mean(dim=(2, 3))


class Positions(nn.Module):
    """A table of 32 position embeddings, sliced to the sequence length."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position_ids", torch.arange(32).unsqueeze(0))
        self.positions = nn.Embedding(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.positions(self.position_ids[:, : x.shape[1]])


class Gathered(nn.Module):
    """Reads the mask at x's batch by indexing with an arange: an index is data, so
    torch.export adds no guard tying the two batches (as BERT's masking does)."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask[torch.arange(x.shape[0])].unsqueeze(-1)


def _refusal(model: nn.Module, inputs: tuple[torch.Tensor, ...], *dims: DynamicDim) -> str:
    with pytest.raises(ExportError) as error:
        with torch.no_grad():
            export_model(model.eval(), inputs, dims)
    assert "draft_export" not in str(error.value) and "Dim(" not in str(error.value)
    return str(error.value)


def test_a_lower_bound_from_strided_layers_says_why() -> None:
    message = _refusal(Strided(), (torch.randn(2, 3, 64, 64),), DynamicDim(((0, 2),), 1, 1024))
    assert message == (
        "torch.export refused the dynamic dims: --dynamic-dim 0.2=1:1024: sizes below 9 fail: layers that divide "
        "input 0 dim 2 by 8 in all (e.g. stride-2 convs or pools) leave a size of 1 there, which the model's code "
        "treats apart. Pass --dynamic-dim 0.2=9:1024"
    )


def test_an_unbounded_dim_keeps_no_upper_bound() -> None:
    message = _refusal(Strided(), (torch.randn(2, 3, 64, 64),), DynamicDim(((0, 2),), 1, None))
    assert message.endswith("Pass --dynamic-dim 0.2=9:"), message


def test_an_upper_bound_from_a_table_is_translated() -> None:
    message = _refusal(Positions(), (torch.randn(2, 16, 4),), DynamicDim(((0, 1),), 2, 64))
    assert message == (
        "torch.export refused the dynamic dims: --dynamic-dim 0.1=2:64: sizes above 32 fail torch's guard "
        "2 <= input 0 dim 1 and input 0 dim 1 <= 32. Pass --dynamic-dim 0.1=2:32"
    )


def test_the_translated_range_exports() -> None:
    with torch.no_grad():
        export_model(Strided().eval(), (torch.randn(2, 3, 64, 64),), [DynamicDim(((0, 2),), 9, 1024)])


def test_a_dim_left_static_that_follows_a_dynamic_one_is_refused() -> None:
    """torch.export accepts this: the mask keeps batch 2, and the package would take
    only that (and index past the mask at any other batch)."""
    inputs = (torch.randn(2, 4), torch.randn(2))
    batch = DynamicDim(((0, 0),), 1, 8)
    with torch.no_grad():
        program = torch.export.export(Gathered(), inputs, dynamic_shapes=({0: torch.export.Dim("b", max=8)}, None))
    mask = next(node for node in program.graph.nodes if node.name == "mask")
    assert tuple(mask.meta["val"].shape) == (2,)  # the silent case, as torch leaves it
    message = _refusal(Gathered(), inputs, batch)
    assert "with input 0 dim 0 at 3 (in its range) the model fails in eager unless input 1 dim 0 is 3 too" in message
    assert message.endswith("Pass them together in one option: --dynamic-dim 0.0,1.0=1:8"), message
    with torch.no_grad():
        export_model(Gathered(), inputs, [DynamicDim(((0, 0), (1, 0)), 1, 8)])


def test_untied_dims_are_positions_for_any_caller() -> None:
    """The fix names positions and ranges, for an API to word as torch.export.Dim."""
    batch = DynamicDim(((0, 0),), 1, 8)
    (fix,) = untied_static_dims(Gathered(), (torch.randn(2, 4), torch.randn(2)), [batch])
    assert isinstance(fix, DimFix) and fix.kind == "tie" and fix.dim == batch
    assert fix.add == ((1, 0),) and fix.positions == ((0, 0), (1, 0))
    assert dynamic_dim_option(fix) == "--dynamic-dim 0.0,1.0=1:8"
    # Given its own dynamic dim, the mask still does not follow: the same fix.
    separate = [batch, DynamicDim(((1, 0),), 1, 8)]
    assert [f.add for f in untied_static_dims(Gathered(), (torch.randn(2, 4), torch.randn(2)), separate)] == [((1, 0),)]
    # A batch of 1..2 whose example is at the top probes 1, where indexing cannot fail.
    assert untied_static_dims(Gathered(), (torch.randn(2, 4), torch.randn(2)), [DynamicDim(((0, 0),), 1, 2)]) == []


def test_export_compile_refuses_a_strided_range_with_the_option_to_pass(tmp_path) -> None:
    code, output = _export([
        "--model", "examples.real_models:resnet_cnn", "--input-shape", "2,3,64,64", "--dynamic-dim", "0.2=1:1024",
        "--output", str(tmp_path / "m.pt2"),
    ])
    assert code == 2, output
    flat = " ".join(output.split())
    assert "sizes below 4 fail: layers that divide input 0 dim 2 by 2 in all" in flat, output
    assert "Pass --dynamic-dim 0.2=4:1024" in flat, output
    assert not (tmp_path / "m.pt2").exists()


def test_export_compile_refuses_bert_with_the_mask_batch_left_static(tmp_path) -> None:
    """The issue's case: --dynamic-dim 0.0=1:8 on BERT used to build a package for batch 2 only."""
    pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
    code, output = _export([
        "--model", "examples.hf_models:bert", "--dynamic-dim", "0.0=1:8", "--output", str(tmp_path / "m.pt2"),
    ])
    assert code == 2, output
    flat = " ".join(output.split())
    assert "unless input 1 dim 0 is 3 too" in flat, output
    assert "Pass them together in one option: --dynamic-dim 0.0,1.0=1:8" in flat, output
    assert not (tmp_path / "m.pt2").exists()
