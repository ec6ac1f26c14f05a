"""The same bits in every runtime: eager, torch.compile, the package in Python and
in C++, over 4 dtypes x static/dynamic shapes x random/special-value inputs."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.models.identity import IdentityModel
from aoti_deploy.package.dtypes import DTYPES
from aoti_deploy.bench.parity import (
    IDENTITY_PAIR,
    RUNTIME_PAIRS,
    attribute_layers,
    cell_passed,
    classify_changes,
    matrix_passed,
)

# Spelled out here, not imported: the test pins what the matrix may excuse.
EXPLAINED_KINDS = {"-0.0 became +0.0", "NaN payload or sign changed", "subnormal flushed to zero"}


def test_matrix_covers_every_cell(parity_matrix):
    _, results = parity_matrix
    cells = {(c.dtype, c.shapes, c.input_kind) for c in results}
    assert cells == {(d, s, i) for d in DTYPES for s in ("static", "dynamic") for i in ("random", "special")}
    assert {c.shape for c in results if c.shapes == "dynamic"} == {(3, 3, 5, 7)}


@pytest.mark.parametrize("pair", RUNTIME_PAIRS)
def test_every_runtime_pair_is_bit_identical_in_every_cell(parity_matrix, pair):
    _, results = parity_matrix
    differing = {(c.dtype, c.shapes, c.input_kind): str(c.pairs[pair]) for c in results if not c.pairs[pair].identical}
    assert not differing


def test_random_inputs_keep_the_identity_contract(parity_matrix):
    _, results = parity_matrix
    for cell in results:
        if cell.input_kind == "random":
            assert cell.identity_holds, (cell.dtype, cell.shapes, str(cell.pairs[IDENTITY_PAIR]))


def test_special_value_deviations_come_from_the_native_convs_only(parity_matrix):
    _, results = parity_matrix
    special = [cell for cell in results if cell.input_kind == "special"]
    # The special input holds -0.0, which the native conv turns into +0.0.
    assert all(not cell.identity_holds for cell in special)
    for cell in special:
        assert cell.layer_changes, (cell.dtype, cell.shapes)
        assert not cell.custom_layer_changed_bits
        for change in cell.layer_changes:
            assert "native depthwise conv" in change.layer
            assert set(change.kinds) <= EXPLAINED_KINDS, change.kinds
        assert "-0.0 became +0.0" in cell.layer_changes[0].kinds
    assert matrix_passed(results)


def test_cell_fails_when_a_runtime_pair_differs(parity_matrix):
    _, results = parity_matrix
    cell = results[0]
    broken = type(cell)(cell.dtype, cell.shapes, cell.input_kind, cell.shape,
                        {**cell.pairs, "AOTI-Python vs AOTI-C++": cell.pairs["input vs eager"].__class__(False, 1, 1)})
    assert not cell_passed(broken)
    assert not matrix_passed([broken])
    assert not matrix_passed([])


def test_cell_fails_on_unexplained_or_random_input_deviations(parity_matrix):
    from dataclasses import replace

    from aoti_deploy.bench.parity import LayerChange
    from aoti_deploy.verify.bits import BitReport

    _, results = parity_matrix
    special = next(c for c in results if c.input_kind == "special")
    assert cell_passed(special)
    odd = LayerChange("layer1 (native depthwise conv)", False, BitReport(False, 1, 1), {"other": 1})
    assert not cell_passed(replace(special, layer_changes=[odd]))
    custom = LayerChange("layer3 (identity_conv_op)", True, BitReport(False, 1, 1), {"-0.0 became +0.0": 1})
    assert not cell_passed(replace(special, layer_changes=[custom]))
    assert not cell_passed(replace(special, input_kind="random"))


def test_classify_changes_names_each_kind():
    before = torch.tensor([-0.0, float("nan"), 1e-45, 1.0, 2.0])
    after = torch.tensor([0.0, float("nan"), 0.0, 1.0, 3.0])
    after_bits = after.view(torch.int32).clone()
    after_bits[1] = 0x7FC00001  # another NaN payload
    after = after_bits.view(torch.float32)
    assert classify_changes(before, after) == {
        "-0.0 became +0.0": 1,
        "NaN payload or sign changed": 1,
        "subnormal flushed to zero": 1,
        "other": 1,
    }


def test_attribute_layers_names_the_conv_for_negative_zero(op_library):
    x = torch.randn(1, 3, 2, 2)
    x[0, 0, 0, 0] = -0.0
    changes = attribute_layers(IdentityModel(3).eval(), x)
    assert [change.layer for change in changes] == ["layer1 (native depthwise conv)"]
    assert changes[0].kinds == {"-0.0 became +0.0": 1}
    assert changes[0].report.first_index == (0, 0, 0, 0)


def test_named_layers_compose_to_forward(op_library):
    model = IdentityModel(3).eval()
    x = torch.randn(2, 3, 4, 4)
    y = x
    with torch.no_grad():
        for _, layer, _ in model.named_layers():
            y = layer(y)
        assert torch.equal(y.view(torch.int32), model(x).view(torch.int32))


def test_verify_matrix_cli(build, op_library, tmp_path):
    result = CliRunner().invoke(cli_app, ["matrix", "--dtypes", "float32", "--shapes", "static", "--inputs", "special",
                                          "--work-dir", str(tmp_path), "--runner", str(build.runner),
                                          "--op-lib", str(op_library)])
    assert result.exit_code == 0, result.output
    assert "bitwise parity matrix" in result.output
    assert "layer1 (native depthwise conv) changed" in result.output
    assert "runtimes agree bit-for-bit in every cell: PASSED" in result.output


def test_verify_matrix_cli_rejects_unknown_axes(build, tmp_path):
    """From a folder with no build/ and no --runner or --op-lib: the axes are checked
    only after the runner and the op library were found in this checkout's build."""
    from conftest import run_cli

    result = run_cli("aoti-deploy", "matrix", "--dtypes", "int8", "--work-dir", tmp_path, cwd=tmp_path, build=build)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown dtype int8" in result.stderr and "not found" not in result.stderr
