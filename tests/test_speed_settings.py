"""The CPU speed settings an export applies by default (compiler/speed.py): applied
and recorded, never over the user's own settings, and dropped for a model whose
compile or check fails with them, so what is written is always verified.

The drop test gives the export three settings that really break: a C++ compiler that
is not there (Inductor's compile fails) and floating-point contraction (the compiled
multiply-add is one FMA, which differs in bits from eager's multiply then add, under
a bitwise rule). Everything else is the real export: Inductor, the compile and the
check against eager."""

from __future__ import annotations

import logging
import re
import zipfile
from types import SimpleNamespace

import pytest
import torch

import aoti_deploy as ad
from aoti_deploy.compiler import speed
from aoti_deploy.compiler.options import ExportOptions
from aoti_deploy.compiler import conv_padding, conv_silu, pixel_convs, tuner
from aoti_deploy.compiler.index_guards import guard_indices
from aoti_deploy.compiler.speed import SpeedSetting, applicable, default_settings, rewritten
from aoti_deploy.package.spec import BITWISE, CLOSE, Tolerance
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.verify.bits import compare_bits
from conftest import run_cli


class MulAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y + 0.3


def names(settings: list[SpeedSetting]) -> list[str]:
    return [setting.name for setting in settings]


def test_cpu_packages_start_with_the_defaults() -> None:
    """All of them for an AVX2 CPU; for an AVX-512 one, all but the linear activations'
    (oneDNN's post-ops measured as fast there)."""
    shared = ["freezing", "one-pixel convs as sums", "zero pads folded into convs", "conv SiLU in Inductor's loops"]
    assert names(default_settings(ExportOptions(cpu_target="x86-64-v3"))) == [
        *shared, "linear GELU and SiLU in Inductor's loops"]
    assert names(default_settings(ExportOptions(cpu_target="x86-64-v4"))) == shared


@pytest.mark.parametrize("options", [
    ExportOptions(optimize=False),
    ExportOptions(device="cuda"),
    ExportOptions(target="onnx"),
], ids=["no-optimize", "cuda", "onnx"])
def test_no_defaults_where_they_do_not_apply(options: ExportOptions) -> None:
    assert default_settings(options) == []


def test_an_int8_export_gets_no_graph_rewrite() -> None:
    assert names(default_settings(ExportOptions(quantize="int8"))) == ["freezing"]


def test_a_setting_the_user_gave_is_theirs() -> None:
    """Freezing off is the user's; the graph rewrites, which set no Inductor config,
    still apply (optimize=False turns them off), but for the one that only undoes a
    fusion of freezing's. Freezing on by the user's word keeps that one."""
    assert names(default_settings(ExportOptions(inductor_configs={"freezing": False}, cpu_target="x86-64-v3"))) == [
        "one-pixel convs as sums", "zero pads folded into convs"]
    assert names(default_settings(ExportOptions(inductor_configs={"freezing": True}, cpu_target="x86-64-v3"))) == [
        "one-pixel convs as sums", "zero pads folded into convs", "conv SiLU in Inductor's loops",
        "linear GELU and SiLU in Inductor's loops"]


class SqueezeExcite(torch.nn.Module):
    """A conv and a squeeze-and-excitation block as EfficientNet has it: global
    pooling, then two 1x1 convs on the one pixel left (one with "same" padding, as
    transformers writes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 32, 3, padding=1)
        self.reduce = torch.nn.Conv2d(32, 8, 1)
        self.expand = torch.nn.Conv2d(8, 32, 1, padding="same")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.silu(self.conv(x))
        scale = torch.sigmoid(self.expand(torch.nn.functional.silu(self.reduce(y.mean((2, 3), keepdim=True)))))
        return y * scale


def squeeze_excite(batch: int = 1) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SqueezeExcite().eval(), torch.randn(batch, 8, 12, 12, generator=torch.Generator().manual_seed(1))


def decomposed(model: torch.nn.Module, x: torch.Tensor) -> torch.export.ExportedProgram:
    """The program as the compile stage gets it: exported, then decomposed by the
    index guards' stage with Inductor's table (SiLU is ``x / (1 + exp(-x))`` there)."""
    with torch.no_grad():
        return guard_indices(torch.export.export(model, (x,)))[0]


def test_one_pixel_convs_are_found_and_rewritten_as_sums_on_a_copy() -> None:
    model, x = squeeze_excite()
    program = decomposed(model, x)
    assert pixel_convs.count(program) == 2  # reduce and expand; not the 3x3 conv of the full map
    rewrite = rewritten(default_settings(ExportOptions()), program)
    assert rewrite is not program and pixel_convs.count(program) == 2  # the original is untouched
    assert pixel_convs.count(rewrite) == 0
    convs = [node for node in rewrite.graph.nodes if node.target is torch.ops.aten.convolution.default]
    assert len(convs) == 1
    with torch.no_grad():
        torch.testing.assert_close(rewrite.module()(x), model(x))


def test_the_rewrites_take_a_sequential_whose_input_is_named_input() -> None:
    """nn.Sequential's argument is ``input``, a builtin's name, which a graph's copy
    renames: each rewrite's program still passes torch.export's check, and computes as
    the model."""
    torch.manual_seed(0)
    x = torch.randn(1, 8, 6, 6)
    for model, rewrite in [
        (torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Conv2d(8, 4, 1)), pixel_convs.as_sums),
        (torch.nn.Sequential(torch.nn.ZeroPad2d(1), torch.nn.Conv2d(8, 4, 3)), conv_padding.into_convs),
    ]:
        program = decomposed(model.eval(), x)
        assert [node.name for node in program.graph.nodes if node.op == "placeholder"][-1] == "input"
        with torch.no_grad():
            torch.testing.assert_close(rewrite(program).module()(x), model(x))


@pytest.mark.parametrize("case", ["batch 2", "float64", "two groups", "a 3x3 map"])
def test_convs_the_rewrite_leaves_alone(case: str) -> None:
    """Only a batch of one (measured faster; batch 8 was not), float32, one group and
    a one-pixel input are rewritten."""
    model, x = squeeze_excite(batch=2 if case == "batch 2" else 1)
    if case == "float64":
        model, x = model.double(), x.double()
    if case == "two groups":
        model.reduce = torch.nn.Conv2d(32, 8, 1, groups=2)
        model.expand = torch.nn.Conv2d(8, 32, 1, groups=2)
    if case == "a 3x3 map":
        model.forward = lambda x: model.reduce(model.conv(x))  # 1x1 convs of a 12x12 map
    assert pixel_convs.count(decomposed(model, x)) == 0


class ConvSilus(torch.nn.Module):
    """SiLU after a conv with batch norm, after a conv with bias alone (the graph's
    output), and after things freezing does not fuse with it: a linear, a transposed
    conv, a conv plus the input, a weight minus a conv, and a conv whose output is
    also read by a sum."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4)
        self.biased = torch.nn.Conv2d(4, 4, 1)
        self.linear = torch.nn.Linear(6, 6)
        self.transposed = torch.nn.ConvTranspose2d(4, 4, 1)
        self.offset = torch.nn.Parameter(torch.randn(1, 4, 1, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        silu = torch.nn.functional.silu
        y = silu(self.norm(self.conv(x)))
        z = self.biased(x)
        others = (silu(self.linear(y)) + silu(self.transposed(y)) + silu(self.biased(y) + x)
                  + silu(self.offset - self.biased(x)) + silu(z) + z)
        return silu(self.biased(y)), others, silu(x)


def conv_silus() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = ConvSilus().eval()
    model.norm.running_mean.uniform_(-1, 1)
    model.norm.running_var.uniform_(0.5, 2)
    return model, torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(1))


def neg_inputs(program: torch.export.ExportedProgram) -> list[str]:
    """What each ``neg`` of the program negates, by the op that made it."""
    return sorted(str(node.args[0].target) if node.args[0].op == "call_function" else node.args[0].op
                  for node in program.graph.nodes if node.target is torch.ops.aten.neg.default)


def test_conv_silus_are_found_and_kept_from_onednn_on_a_copy() -> None:
    """Of eight SiLUs, the two of a conv's output (through its batch norm, or its bias
    alone) are rewritten: negated as ``x * -1``, which oneDNN's fusion pattern does
    not match. The copy computes eager's SiLU to the bit, as the original does."""
    model, x = conv_silus()
    program = decomposed(model, x)
    assert conv_silu.count(program) == 2
    rewrite = conv_silu.unfused(program)
    assert conv_silu.count(program) == 2 and conv_silu.count(rewrite) == 0  # the original is untouched
    assert len(neg_inputs(program)) == 8
    # Left: the linear's (a view of its addmm), the transposed conv's, the sum's, the
    # weight minus conv's, the conv read twice, the input's.
    assert neg_inputs(rewrite) == ["aten.add.Tensor", "aten.convolution.default", "aten.convolution.default",
                                   "aten.sub.Tensor", "aten.view.default", "placeholder"]
    with torch.no_grad():
        for rewritten_out, out in zip(rewrite.module()(x), program.module()(x)):
            assert compare_bits(rewritten_out, out).identical


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_conv_silus_of_other_dtypes_are_left_alone(dtype: torch.dtype) -> None:
    """oneDNN convolves no float64 (nothing to unfuse), and a bfloat16 SiLU computes in
    float32 behind a conversion, which the rewrite does not follow."""
    model, x = conv_silus()
    assert conv_silu.count(decomposed(model.to(dtype), x.to(dtype))) == 0


def test_a_silu_of_a_one_pixel_conv_is_not_counted_once_summed() -> None:
    """The rewrites run in order: where the only conv SiLU is a one-pixel conv's, which
    the sums rewrite first, the SiLU setting is not listed as applied."""
    model, x = squeeze_excite()
    model.forward = lambda x: torch.nn.functional.silu(model.reduce(model.conv(x).mean((2, 3), keepdim=True)))
    program = decomposed(model, x)
    assert conv_silu.count(program) == 1
    assert names(applicable(default_settings(ExportOptions()), program, Tolerance(CLOSE))) == [
        "freezing", "one-pixel convs as sums"]


def test_rewrites_that_change_bits_are_left_out_of_a_bitwise_export() -> None:
    model, x = squeeze_excite()
    program = decomposed(model, x)
    settings = default_settings(ExportOptions())
    assert names(applicable(settings, program, Tolerance(CLOSE))) == [
        "freezing", "one-pixel convs as sums", "conv SiLU in Inductor's loops"]
    assert names(applicable(settings, program, Tolerance(BITWISE))) == ["freezing"]
    # Nothing to rewrite: the setting is not listed as applied.
    plain = torch.export.export(MulAdd(), (x, x)).run_decompositions()
    assert names(applicable(settings, plain, Tolerance(CLOSE))) == ["freezing"]


def onednn_calls(package_path, op: str = "mkldnn__convolution_pointwise") -> list[str]:  # noqa: ANN001
    """The calls of one oneDNN op in a package's generated wrapper."""
    with zipfile.ZipFile(package_path) as archive:
        wrapper = next(archive.read(name).decode() for name in archive.namelist() if name.endswith("wrapper.cpp"))
    return re.findall(rf"aoti_torch_cpu_{op}\([^;]*;", wrapper)


def conv_calls(package_path) -> list[str]:  # noqa: ANN001
    """The oneDNN convolution calls of a package's generated wrapper."""
    return onednn_calls(package_path)


def without(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The CPU defaults less the one named."""
    assert name in names(list(speed.CPU_DEFAULTS))
    monkeypatch.setattr(speed, "CPU_DEFAULTS", tuple(s for s in speed.CPU_DEFAULTS if s.name != name))


def test_a_squeeze_excite_package_sums_its_one_pixel_convs(tmp_path, build, monkeypatch) -> None:  # noqa: ANN001
    """The real export: the two one-pixel convs are compiled as Inductor loops (one
    oneDNN convolution is left, the 3x3, and its SiLU is Inductor's, not oneDNN's
    swish), the package passes its check against eager at torch.testing's tolerance,
    records the settings, and the C++ runner gives the Python runtime's bits.
    Exported again, the cached package says the same."""
    model, x = squeeze_excite()
    applied = ["freezing", "one-pixel convs as sums", "conv SiLU in Inductor's loops"]
    package = ad.export(model, (x,), package_path=tmp_path / "se.pt2")
    assert package.result.passed and package.result.speed_settings == applied
    assert "speed settings: " + ", ".join(applied) in package.spec.optimizations
    calls = conv_calls(tmp_path / "se.pt2")
    assert len(calls) == 1 and '"swish"' not in calls[0] and '"none"' in calls[0]
    assert package.verify((x,), against="cpp").passed
    again = ad.export(model, (x,), package_path=tmp_path / "se.pt2")
    assert again.result.cached and again.result.speed_settings == applied
    # Under bits, the rewrite does not apply: the package is compiled again without
    # it (and then without freezing: no conv here is eager's bits), not reverified as
    # it was, with no way back.
    stages: list[str] = []
    with pytest.raises(ad.VerificationError, match=r"tolerance \(bitwise\)"):
        ad.export(model, (x,), package_path=tmp_path / "se.pt2", tolerance="bitwise", on_stage=stages.append)
    assert "compile again without freezing" in stages
    # The control: without the SiLU setting, freezing fuses that SiLU into the conv
    # as oneDNN's swish (if a torch stops doing so, the setting is for nothing).
    without(monkeypatch, "conv SiLU in Inductor's loops")
    fused = ad.export(model, (x,), package_path=tmp_path / "fused.pt2")
    assert fused.result.speed_settings == ["freezing", "one-pixel convs as sums"]
    assert ['"swish"' in call for call in conv_calls(tmp_path / "fused.pt2")] == [True]


def tune_names(model: torch.nn.Module, x: torch.Tensor, **options: object) -> list[str]:
    run = SimpleNamespace(options=ExportOptions(optimize="tune", **options), tolerance=Tolerance(CLOSE))
    return [candidate.name for candidate in tuner.candidates(run, decomposed(model, x))]


class SamePadded(torch.nn.Module):
    """Convolutions padded by hand, as transformers' MobileNetV2 does with its
    default ``tf_padding``: a 3x3 conv after a pad of 1 on every side, a 1x1 conv
    after a pad of 0, and a stride-2 3x3 conv after a pad on the bottom and right
    only (TensorFlow's "SAME" for an even input), which no conv padding equals."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = torch.nn.Conv2d(8, 8, 3, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.down = torch.nn.Conv2d(16, 16, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = torch.nn.functional.pad
        y = torch.nn.functional.relu6(self.depthwise(pad(x, (1, 1, 1, 1), "constant", 0.0)))
        y = self.pointwise(pad(y, (0, 0, 0, 0), "constant", 0.0))
        return self.down(pad(y, (0, 1, 0, 1), "constant", 0.0))


def same_padded() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SamePadded().eval(), torch.randn(1, 8, 12, 12, generator=torch.Generator().manual_seed(1))


def pads_and_paddings(program: torch.export.ExportedProgram) -> tuple[list[list[int]], list[list[int]]]:
    nodes = list(program.graph.nodes)
    pads = [list(node.args[1]) for node in nodes if node.target is torch.ops.aten.constant_pad_nd.default]
    paddings = [list(node.args[4]) for node in nodes if node.target is torch.ops.aten.convolution.default]
    return pads, paddings


def test_symmetric_zero_pads_fold_into_their_convs_on_a_copy() -> None:
    model, x = same_padded()
    program = decomposed(model, x)
    assert conv_padding.count(program) == 2
    rewrite = conv_padding.into_convs(program)
    assert pads_and_paddings(program) == ([[1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 1]], [[0, 0], [0, 0], [0, 0]])
    # The one-sided pad stays; the others became the convs' own padding.
    assert pads_and_paddings(rewrite) == ([[0, 1, 0, 1]], [[1, 1], [0, 0], [0, 0]])
    with torch.no_grad():
        torch.testing.assert_close(rewrite.module()(x), model(x))


def test_a_pad_adds_to_the_convs_own_padding_height_first() -> None:
    """A pad of 2 left and right and 1 top and bottom, before a conv padded by 1: the
    conv's padding becomes [1 + 1, 1 + 2] (height, width), and it computes as before."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1, dilation=(1, 2))
    model = torch.nn.Sequential(torch.nn.ZeroPad2d((2, 2, 1, 1)), conv).eval()
    x = torch.randn(1, 4, 7, 9)
    rewrite = conv_padding.into_convs(decomposed(model, x))
    assert pads_and_paddings(rewrite) == ([], [[2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(rewrite.module()(x), model(x))


class PadReadTwice(torch.nn.Module):
    """A pad read by its conv and by something else: a sum, or the graph's output."""

    def __init__(self, as_output: bool) -> None:
        super().__init__()
        self.conv, self.as_output = torch.nn.Conv2d(4, 4, 3), as_output

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
        return self.conv(padded), padded if self.as_output else padded.sum()


@pytest.mark.parametrize("case", [
    "pad value 1", "the pad read by another op", "the pad an output", "a transposed conv", "a crop (negative pad)",
    "channels padded too", "a 1-d conv"])
def test_pads_the_rewrite_leaves_alone(case: str) -> None:
    """Only zeros added to height and width of a 4-d float tensor, and only where every
    reader of the pad is a 2-d conv that pads as it."""
    x = torch.randn(1, 4, 6, 6)
    zero_pad_conv = {
        "pad value 1": (torch.nn.ConstantPad2d(1, 1.0), torch.nn.Conv2d(4, 4, 3)),
        "a transposed conv": (torch.nn.ZeroPad2d(1), torch.nn.ConvTranspose2d(4, 4, 3)),
        "a crop (negative pad)": (torch.nn.ZeroPad2d(-1), torch.nn.Conv2d(4, 4, 3, padding=2)),
        "channels padded too": (torch.nn.ConstantPad3d((1, 1, 1, 1, 1, 1), 0.0), torch.nn.Conv2d(6, 4, 3)),
    }
    if case in zero_pad_conv:
        model = torch.nn.Sequential(*zero_pad_conv[case])
    elif case in ("the pad read by another op", "the pad an output"):
        model = PadReadTwice(as_output=case == "the pad an output")
    else:
        model, x = torch.nn.Sequential(torch.nn.ConstantPad1d(1, 0.0), torch.nn.Conv1d(4, 4, 3)), torch.randn(1, 4, 6)
    assert conv_padding.count(decomposed(model.eval(), x)) == 0


def test_a_same_padded_package_folds_its_pads(tmp_path, build) -> None:  # noqa: ANN001
    """The real export: the package records the setting, compiles one pad loop (the
    one-sided pad's; the folded ones are gone), passes its check against eager at
    torch.testing's tolerance, and the C++ runner gives the Python runtime's bits."""
    model, x = same_padded()
    package = ad.export(model, (x,), package_path=tmp_path / "same.pt2")
    assert package.result.passed and "zero pads folded into convs" in package.result.speed_settings
    assert "zero pads folded into convs" in package.spec.optimizations
    with zipfile.ZipFile(tmp_path / "same.pt2") as archive:
        kernels = "".join(archive.read(name).decode() for name in archive.namelist() if name.endswith(".cpp"))
    assert len(set(re.findall(r"cpp_fused_\w*constant_pad_nd\w*", kernels))) == 1
    assert package.verify((x,), against="cpp").passed


def test_tune_candidates_name_and_record_the_rewrite() -> None:
    """The candidates built on the defaults say they sum one-pixel convs, and record
    it as the defaults do (so a reused tuned package reports it)."""
    model, x = squeeze_excite()
    rewrites = "one-pixel convs as sums, conv SiLU in Inductor's loops"
    assert tune_names(model, x) == [
        f"toolkit defaults (freezing, {rewrites})", "Inductor's defaults",
        f"freezing + C++ GEMM template, {rewrites}", f"freezing, NCHW layout, {rewrites}"]
    run = SimpleNamespace(options=ExportOptions(optimize="tune"), tolerance=Tolerance(CLOSE))
    notes = [candidate.note for candidate in tuner.candidates(run, decomposed(model, x))]
    assert notes[1] == "" and set(notes[::2] + notes[3:]) == {f"speed settings: freezing, {rewrites}"}
    model, x = squeeze_excite(batch=2)  # nothing to rewrite, and the user said no to freezing
    # Nor do the others say freezing: the user's setting applies over each candidate
    # (and Inductor's defaults are then the toolkit's, tried once).
    assert tune_names(model, x, inductor_configs={"freezing": False}) == [
        "toolkit defaults (none apply)", "C++ GEMM template", "NCHW layout"]


def test_a_frozen_model_with_linears_is_also_tuned_with_its_linears_on_mkl() -> None:
    """A linear gets one more candidate: frozen, without weight packing, so its linears
    run MKL's sgemm rather than oneDNN's packed inner product. Not without freezing
    (nothing is packed then), and once where the user already said no to packing."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(3, 16)
    run = SimpleNamespace(options=ExportOptions(optimize="tune"), tolerance=Tolerance(CLOSE))
    listed = tuner.candidates(run, decomposed(model, x))
    assert listed[-1].name == "freezing, linears on MKL (no weight packing)"
    assert listed[-1].configs == {**listed[0].configs, "cpp.weight_prepack": False} and len(listed) == 5
    assert "linears on MKL" not in " ".join(tune_names(model, x, inductor_configs={"freezing": False}))
    names = tune_names(model, x, inductor_configs={"cpp.weight_prepack": False})
    assert len(names) == 4 and "linears on MKL" not in " ".join(names)
    # A model without a linear has the four.
    assert len(tune_names(torch.nn.ReLU(), x)) == 4


def test_a_dynamic_shape_is_said_to_cost_a_frozen_package_its_packed_convolutions() -> None:
    """Freezing packs convolution weights for one shape; dynamic in batch, oneDNN
    reorders them on every call (ResNet-50 1.22x slower at batch 1, measured in
    docs/performance-real-models.md), and the export says so. Not for a static shape,
    a model without convolutions, or a compile without freezing."""
    model, x = squeeze_excite(batch=2)
    with torch.no_grad():
        dynamic = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=8)},))
        dynamic = dynamic.run_decompositions()
    cost = speed.dynamic_shape_cost(dynamic, {"freezing": True})
    # The 3x3 conv and the two of the pooled map, whose batch is dynamic too.
    assert cost.startswith("this package is dynamic in shape, so oneDNN cannot keep the weights of 3 convolutions "
                           "packed and reorders them on every call"), cost
    assert "export one static package per batch you serve" in cost
    assert speed.dynamic_shape_cost(dynamic, {"freezing": False}) == speed.dynamic_shape_cost(dynamic, {}) == ""
    assert speed.dynamic_shape_cost(decomposed(model, x), {"freezing": True}) == ""
    with torch.no_grad():
        no_convs = torch.export.export(MulAdd(), (x, x), dynamic_shapes=({0: torch.export.Dim("batch", max=8)},) * 2)
    assert speed.dynamic_shape_cost(no_convs.run_decompositions(), {"freezing": True}) == ""
    # Inductor never packs a 1-d conv's weights, and packs a conv of a static input once.
    conv1d = torch.nn.Conv1d(4, 4, 3).eval()
    with torch.no_grad():
        program = torch.export.export(conv1d, (torch.randn(2, 4, 16),),
                                      dynamic_shapes=({0: torch.export.Dim("batch", max=8)},))
    assert speed.dynamic_shape_cost(program.run_decompositions(), {"freezing": True}) == ""

    class StaticImage(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, image: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
            return self.conv(image).sum() + tokens.sum()

    with torch.no_grad():
        program = torch.export.export(StaticImage().eval(), (torch.randn(1, 3, 8, 8), torch.randn(2, 5)),
                                      dynamic_shapes=(None, {0: torch.export.Dim("rows", max=8)}))
    assert speed.dynamic_shape_cost(program.run_decompositions(), {"freezing": True}) == ""


def test_the_demo_package_records_freezing(compiled_package) -> None:  # noqa: ANN001
    spec = read_package_spec(compiled_package.path)
    assert spec.inductor_configs == {"freezing": True}
    assert "speed settings: freezing" in spec.optimizations


def test_a_setting_that_breaks_a_model_is_dropped_and_said(monkeypatch: pytest.MonkeyPatch, tmp_path,  # noqa: ANN001
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(speed, "CPU_DEFAULTS", (
        speed.CPU_DEFAULTS[0],
        SpeedSetting("fp-contract", {"cpp.enable_floating_point_contract_flag": "fast"}),
        SpeedSetting("missing-compiler", {"cpp.cxx": "no-such-compiler"}),
    ))
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(4, 1024, generator=generator), torch.randn(4, 1024, generator=generator)
    stages: list[str] = []
    with caplog.at_level(logging.WARNING, logger="aoti_deploy"):
        package = ad.export(MulAdd(), (x, y), package_path=tmp_path / "muladd.pt2", tolerance="bitwise",
                            on_stage=stages.append)
    result = package.result
    dropped = {setting.name: reason for setting, reason in result.dropped_settings}
    assert list(dropped) == ["missing-compiler", "fp-contract"]
    assert dropped["missing-compiler"].startswith("the compile failed:")
    assert "no-such-compiler" in dropped["missing-compiler"]
    assert dropped["fp-contract"].startswith("the package failed its check against eager:")
    assert "elements differ" in dropped["fp-contract"]
    assert result.speed_settings == ["freezing"]
    assert result.bit_identical
    # The package records what it was compiled with, and what was dropped.
    assert package.spec.inductor_configs == {"freezing": True}
    assert "speed settings: freezing; dropped missing-compiler" in package.spec.optimizations
    assert "dropped fp-contract (the package failed its check" in package.spec.optimizations
    assert stages.count("compile") == 1
    assert "compile again without missing-compiler" in stages and "compile again without fp-contract" in stages
    warned = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any("compiled without fp-contract for this model" in line for line in warned)
    out = package(x, y)
    assert compare_bits(out, x * y + 0.3).identical
    # Exported again: the package is reused, and says what it was compiled with.
    again = ad.export(MulAdd(), (x, y), package_path=tmp_path / "muladd.pt2", tolerance="bitwise")
    assert again.result.cached and again.result.speed_settings == ["freezing"]


def test_a_graph_rewrite_that_raises_is_dropped_not_the_export(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path) -> None:  # noqa: ANN001
    """A rewrite that finds something but cannot take the graph is dropped and said,
    like a setting whose compile fails; the package is compiled without it."""
    def broken(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
        raise ValueError("no such node")

    monkeypatch.setattr(speed, "CPU_DEFAULTS", (
        speed.CPU_DEFAULTS[0], SpeedSetting("broken rewrite", {}, lambda program: 1, broken)))
    x = torch.randn(4, 8)
    package = ad.export(MulAdd(), (x, x), package_path=tmp_path / "muladd.pt2")
    assert package.result.passed and package.result.speed_settings == ["freezing"]
    dropped = {setting.name: reason for setting, reason in package.result.dropped_settings}
    assert dropped == {"broken rewrite": "the graph rewrite failed: ValueError: no such node"}
    assert "dropped broken rewrite (the graph rewrite failed" in package.spec.optimizations


def test_tune_keeps_the_fastest_verified_candidate(tmp_path, build) -> None:  # noqa: ANN001
    """Every candidate compiled and verified, then all timed in the C++ runner; the package is
    the fastest one's, records every row, and inspect shows them. Tuned for 1 intra-op
    thread (``threads``): the package records it, and the export leaves this
    process's thread count as it was."""
    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 1024, generator=generator), torch.randn(64, 1024, generator=generator)
    stages: list[str] = []
    threads = torch.get_num_threads()
    package = ad.export(MulAdd(), (x, y), package_path=tmp_path / "tuned.pt2", optimize="tune",
                        on_stage=stages.append, threads=1)
    assert package.spec.intra_op_threads == 1 and torch.get_num_threads() == threads
    rows = package.spec.tuning
    assert [row["name"] for row in rows] == [
        "toolkit defaults (freezing)", "Inductor's defaults", "freezing + C++ GEMM template", "freezing, NCHW layout"]
    assert all(row["result"].startswith("verified") and row["p50_us"] > 0 for row in rows), rows
    chosen = [row for row in rows if row["result"] == "verified; chosen, the fastest"]
    assert len(chosen) == 1 and chosen[0]["p50_us"] == min(row["p50_us"] for row in rows)
    assert package.spec.inductor_configs == chosen[0]["inductor_configs"]
    assert f"tuned: {chosen[0]['name']}, the fastest verified of 4 candidates" in package.spec.optimizations
    assert "tune 1/4: toolkit defaults (freezing): compile" in stages
    # Timed after every compile and check, in rounds that take all four in turn.
    timed = [i for i, stage in enumerate(stages) if ": time" in stage]
    assert max(i for i, stage in enumerate(stages) if stage.endswith((": compile", ": verify"))) < min(timed), stages
    assert [stages[i] for i in timed][-4:] == [
        "tune 4/4: freezing, NCHW layout: time its first runs",
        *(f"tune: time the 4 verified candidates, round {r}/3" for r in (1, 2, 3))], stages
    assert package.result.passed
    # The written package is the chosen one, and still runs as eager does.
    assert compare_bits(package(x, y), x * y + 0.3).identical
    shown = run_cli("aoti-deploy", "inspect", str(tmp_path / "tuned.pt2"), cwd=tmp_path, build=build)
    assert shown.returncode == 0, shown.stderr
    assert "tuning: Inductor's defaults" in shown.stdout and "chosen, the fastest" in shown.stdout
    # A reread spec keeps the rows (the runners ignore them).
    assert read_package_spec(tmp_path / "tuned.pt2").tuning == rows


def test_tune_stops_at_its_budget(tmp_path, build) -> None:  # noqa: ANN001
    """From the CLI: the first candidate is always tried; once the budget is spent,
    the others are recorded as not tried."""
    out = tmp_path / "budget.pt2"
    result = run_cli("aoti-deploy", "export", "--output", str(out), "--tune", "--tune-budget", "1", "--threads", "3",
                     cwd=tmp_path, build=build, COLUMNS="200")
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_package_spec(out).intra_op_threads == 3
    rows = read_package_spec(out).tuning
    assert rows[0]["result"] == "verified; chosen, the fastest"
    assert [row["result"] for row in rows[1:]] == ["not tried: the tuning budget of 1 s was spent"] * (len(rows) - 1)
    assert "tune: Inductor's defaults" in result.stdout and "not tried" in result.stdout


@pytest.mark.parametrize("values, expected", [
    ({"optimize": "fast"}, "optimize must be True, False or 'tune'; got 'fast'"),
    ({"optimize": "tune", "target": "onnx"}, "tunes .pt2 packages for the CPU, but this export's target is onnx on cpu"),
    ({"optimize": "tune", "tune_budget": 0}, "tune_budget must be a positive number of seconds; got 0"),
    ({"threads": 0}, "threads must be an intra-op thread count from 1 to 1024; got 0"),
    ({"threads": True}, "threads must be an intra-op thread count from 1 to 1024; got True"),
    ({"threads": 1025}, "threads must be an intra-op thread count from 1 to 1024; got 1025"),
    ({"threads": 2, "target": "onnx"}, "threads sets the intra-op thread count a CPU .pt2 package is compiled for, "
                                       "but this export's target is onnx on cpu; leave threads out"),
])
def test_tune_options_are_checked(values: dict, expected: str, tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(ad.InputError) as error:
        ad.export(MulAdd(), (torch.ones(2), torch.ones(2)), package_path=tmp_path / "x.pt2", **values)
    assert expected in str(error.value)
    assert not list(tmp_path.iterdir())


def test_an_export_that_fails_at_another_thread_count_restores_this_processs(tmp_path) -> None:  # noqa: ANN001
    class Broken(torch.nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            raise ValueError("broken on purpose")

    threads = torch.get_num_threads()
    other = 1 if threads > 1 else 2
    with pytest.raises(ad.AotiDeployError, match="broken on purpose"):
        ad.export(Broken(), (torch.ones(2),), package_path=tmp_path / "broken.pt2", threads=other)
    assert torch.get_num_threads() == threads


def test_freezing_really_prepacks(tmp_path) -> None:  # noqa: ANN001
    """Inductor applies freezing only to a compile without autograd, and says nothing
    otherwise: the default package's generated code calls oneDNN's convolution on
    weights prepacked at compile time (mkldnn._convolution_pointwise), not aten's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    package = ad.export(model, (torch.randn(1, 3, 16, 16),), package_path=tmp_path / "conv.pt2")
    with zipfile.ZipFile(tmp_path / "conv.pt2") as archive:
        code = "".join(archive.read(name).decode(errors="replace") for name in archive.namelist()
                       if name.endswith("wrapper.cpp"))
    assert package.spec.inductor_configs == {"freezing": True}
    assert "_convolution_pointwise" in code
    # Laid out for this process's thread count, which the package records.
    assert package.spec.intra_op_threads == torch.get_num_threads()
