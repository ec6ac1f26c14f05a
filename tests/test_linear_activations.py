"""The CPU default "linear GELU and SiLU in Inductor's loops" (compiler/linear_activations.py):
which activations it finds, that its copy computes the original's bits, and the real
export: no linear of the package is fused with its activation by oneDNN, the package
passes its check, and the C++ runner gives the Python runtime's bits. The control
shows that without the setting freezing does fuse them."""

from __future__ import annotations

import re
import zipfile

import pytest
import torch

import aoti_deploy as ad
from aoti_deploy.compiler import linear_activations, speed
from aoti_deploy.compiler.index_guards import guard_indices
from aoti_deploy.compiler.options import ExportOptions
from aoti_deploy.compiler.speed import applicable, default_settings
from aoti_deploy.package.spec import BITWISE, CLOSE, Tolerance
from aoti_deploy.verify.bits import compare_bits

SETTING = "linear GELU and SiLU in Inductor's loops"
gelu, silu = torch.nn.functional.gelu, torch.nn.functional.silu


class Activations(torch.nn.Module):
    """The three forms after linears: an MLP's GELU on a 3-d input, GELU's tanh form
    after a linear with no bias, and a SwiGLU gate's SiLU on a 2-d input; then
    activations freezing does not fuse with a linear, which are left alone: a linear
    whose output is also read by a sum, a linear whose weight is an input, and a GELU
    of the input itself."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8, bias=False)
        self.gate, self.value = torch.nn.Linear(8, 12), torch.nn.Linear(8, 12)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = gelu(self.up(x))                                   # 3-d: view, addmm, view
        t = gelu(self.down(h), approximate="tanh")             # no bias: mm
        flat = t.reshape(-1, 8)
        swiglu = silu(self.gate(flat)) * self.value(flat)      # 2-d: addmm
        shared = self.value(flat)
        left = gelu(shared) + shared + gelu(torch.nn.functional.linear(flat, w)) + gelu(flat).sum()
        return swiglu, left


def activations() -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    return Activations().eval(), (torch.randn(2, 5, 8, generator=generator), torch.randn(12, 8, generator=generator))


def decomposed(model: torch.nn.Module, args: tuple) -> torch.export.ExportedProgram:
    """The program as the compile stage gets it (decomposed with Inductor's table)."""
    with torch.no_grad():
        return guard_indices(torch.export.export(model, args))[0]


def counted(program: torch.export.ExportedProgram, op: object) -> int:
    return sum(node.target is op for node in program.graph.nodes)


def test_the_three_forms_are_found_and_a_copy_unfuses_them_to_the_bit() -> None:
    model, args = activations()
    program = decomposed(model, args)
    assert linear_activations.count(program) == 3  # of six activations
    rewrite = linear_activations.unfused(program)
    assert linear_activations.count(program) == 3 and linear_activations.count(rewrite) == 0  # the original is kept
    # One SiLU's neg became a multiply by -1; the other activations' nodes are all there.
    aten = torch.ops.aten
    assert counted(program, aten.neg.default) - counted(rewrite, aten.neg.default) == 1
    assert [counted(rewrite, op) for op in (aten.erf.default, aten.tanh.default)] == [4, 1]
    with torch.no_grad():
        for rewritten_out, out in zip(rewrite.module()(*args), program.module()(*args), strict=True):
            assert compare_bits(rewritten_out, out).identical


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_activations_of_other_dtypes_are_left_alone(dtype: torch.dtype) -> None:
    """oneDNN fuses no float64 linear, and a bfloat16 GELU computes in float32 behind a
    conversion, which the rewrite does not follow."""
    model, args = activations()
    assert linear_activations.count(decomposed(model.to(dtype), tuple(a.to(dtype) for a in args))) == 0


# The setting applies to packages for CPUs without AVX-512 (speed.py): the tests
# compile for AVX2, which every host that runs them has.
AVX2 = "x86-64-v3"


def test_the_setting_needs_freezing_a_tolerance_and_no_avx512() -> None:
    model, args = activations()
    program = decomposed(model, args)

    def applied(tolerance: str = CLOSE, **options: object) -> bool:
        settings = applicable(default_settings(ExportOptions(**options)), program, Tolerance(tolerance))
        return SETTING in [s.name for s in settings]

    assert applied(cpu_target=AVX2)
    assert not applied(BITWISE, cpu_target=AVX2)
    assert not applied(cpu_target=AVX2, inductor_configs={"freezing": False})
    assert not applied(cpu_target="x86-64-v4")


def linear_calls(package_path) -> list[str]:  # noqa: ANN001
    """The attribute (post-op) of each oneDNN linear in a package's generated wrapper."""
    with zipfile.ZipFile(package_path) as archive:
        wrapper = next(archive.read(name).decode() for name in archive.namelist() if name.endswith("wrapper.cpp"))
    return re.findall(r"aoti_torch_cpu__linear_pointwise\(.*?, \"(\w+)\", std::array", wrapper)


def test_a_package_computes_its_linear_activations_in_inductor_loops(tmp_path, build, monkeypatch) -> None:  # noqa: ANN001
    """The real export with the defaults, for an AVX2 CPU: every weight's linear is a oneDNN call with
    no post-op, the package passes its check against eager at torch.testing's
    tolerance and records the setting, and the C++ runner gives the Python runtime's
    bits. The control: without the setting, freezing fuses all three activations as
    oneDNN post-ops (if a torch stops doing so, the setting is for nothing)."""
    model, args = activations()
    package = ad.export(model, args, package_path=tmp_path / "mlp.pt2", cpu_target=AVX2)
    assert package.result.passed and package.result.speed_settings == ["freezing", SETTING]
    assert linear_calls(tmp_path / "mlp.pt2") == ["none"] * 4
    assert package.verify(args, against="cpp").passed
    monkeypatch.setattr(speed, "CPU_DEFAULTS", tuple(s for s in speed.CPU_DEFAULTS if s.name != SETTING))
    fused = ad.export(model, args, package_path=tmp_path / "fused.pt2", cpu_target=AVX2)
    assert fused.result.passed and fused.result.speed_settings == ["freezing"]
    assert sorted(linear_calls(tmp_path / "fused.pt2")) == ["gelu", "gelu", "none", "swish"]
