"""torch.export of the IdentityModel keeps both custom layers, and the package
records what it needs."""

from __future__ import annotations

import torch

from identity_conv.compiler.export import export_model, graph_calls
from identity_conv.models.identity import IdentityModel
from identity_conv.package.archive import read_package_spec


def test_exported_graph_calls_the_torchbind_class_and_the_custom_op(op_library):
    program = export_model(IdentityModel(4).eval(), (torch.randn(1, 4, 5, 6),))
    graph = str(program.graph)
    assert "call_torchbind" in graph
    assert "my_ops.identity_conv_op" in graph
    assert graph.count("aten.conv2d") == 2
    calls = graph_calls(program)
    assert calls.ops == ["my_ops::identity_conv_op"]
    assert calls.classes == ["my_ops::IdentityConvClass"]


def test_eager_model_is_an_identity_on_random_input(op_library):
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        y = IdentityModel(3).eval()(x)
    assert torch.equal(y.view(torch.int32), x.view(torch.int32))


def test_package_records_its_spec(compiled_package):
    spec = read_package_spec(compiled_package.path)
    assert [str(d) for d in spec.inputs[0].dims] == ["2", "3", "8", "12"]
    assert spec.inputs[0].dtype == "float32"
    assert spec.device == "cpu"
    assert [str(op) for op in spec.required_ops] == ["my_ops::identity_conv_op"]
    assert spec.required_classes == ["my_ops::IdentityConvClass"]
    assert spec.op_libraries == ["libidentity_conv_ops.so"]
    assert spec.is_identity
    assert spec.torch_version == torch.__version__
    # AOTI's own entries survive next to ours.
    assert spec.aoti.get("AOTI_DEVICE_KEY") == "cpu"
