"""How custom ops and torchbind classes reach ONNX. This module imports nothing
from the ONNX packages, so an op library's Python side can register its
translations next to its fakes whether or not the ONNX extra is installed.

- A *portable translation* turns one call of a custom op into standard ONNX ops. It
  is called with the standard opset first (an onnxscript opset, e.g. ``op.Identity``),
  then the op's arguments as the graph passes them: tensors as ONNX values, ints,
  floats and strings as Python values.
- A *class route* says which op stands for a torchbind class's method. An ONNX graph
  has no stateful objects, so for the export each such object is replaced by a proxy
  whose method calls that op with the object's flattened state
  (``__obj_flatten__``) as keyword arguments. The op then needs a translation (or,
  in the custom-domain mode, becomes a node with the state as attributes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PortableTranslation = Callable[..., Any]

_PORTABLE: dict[str, PortableTranslation] = {}
_CLASS_ROUTES: dict[tuple[str, str], str] = {}


def register_onnx_translation(op: str, portable: PortableTranslation) -> None:
    """Register how ``op`` (``namespace::name``) is written in standard ONNX ops.

    Args:
        op: the custom op's qualified name.
        portable: ``fn(opset, *args)`` returning the ONNX value(s) of the op's outputs,
            e.g. ``lambda op, x: op.Identity(x)``.
    """
    _PORTABLE[op] = portable


def register_onnx_class_route(class_name: str, method: str, op: str) -> None:
    """Register that ``class_name.method(*args)`` is ``op(*args, **state)``, where
    ``state`` is the object's ``__obj_flatten__`` output as keyword arguments.

    Args:
        class_name: the torchbind class, ``namespace::Name``.
        method: the method the model calls, e.g. ``forward``.
        op: an op that takes the method's arguments then the state, ``namespace::name``.
    """
    _CLASS_ROUTES[(class_name, method)] = op


def portable_translation(op: str) -> PortableTranslation | None:
    """The registered portable translation of ``op``, or None."""
    return _PORTABLE.get(op)


def class_routes(class_name: str) -> dict[str, str]:
    """``{method: op}`` for the routed methods of ``class_name``."""
    return {method: op for (name, method), op in _CLASS_ROUTES.items() if name == class_name}


# The project's own ops. The op and the class's forward are identities, so ONNX's
# Identity is exact; the class reaches ONNX through its op over the flattened state.
# Registered here, where the ONNX export reads them, so the op loader needs no ONNX.
def _onnx_identity_conv(op: Any, x: Any) -> Any:
    """Portable ONNX translation of ``my_ops::identity_conv_op``: ``Identity``."""
    return op.Identity(x)


def _onnx_identity_conv_class_forward(op: Any, x: Any, channels: int) -> Any:
    """Portable ONNX translation of the class's forward. The channel check stays in
    the graph's input shape, whose channel dim is static."""
    return op.Identity(x)


register_onnx_translation("my_ops::identity_conv_op", _onnx_identity_conv)
register_onnx_translation("my_ops::identity_conv_class_forward", _onnx_identity_conv_class_forward)
register_onnx_class_route("my_ops::IdentityConvClass", "forward", "my_ops::identity_conv_class_forward")
