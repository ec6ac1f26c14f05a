"""Module paths from before the stage layout, kept importable: a user's fakes module
may ``from identity_conv.onnx_translations import register_onnx_translation``. Each
old path is an alias of the module that now holds its code (the same module object)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "identity_conv.model": "identity_conv.models.identity",
    "identity_conv.user_model": "identity_conv.models.user",
    "identity_conv.train": "identity_conv.models.train",
    "identity_conv.export": "identity_conv.compiler.export",
    "identity_conv.optimize": "identity_conv.compiler.optimize",
    "identity_conv.compile": "identity_conv.compiler.compile",
    "identity_conv.cache": "identity_conv.compiler.cache",
    "identity_conv.pipeline": "identity_conv.compiler.pipeline",
    "identity_conv.onnx_export": "identity_conv.compiler.onnx_export",
    "identity_conv.onnx_translations": "identity_conv.compiler.onnx_translations",
    "identity_conv.host": "identity_conv.package.host",
    "identity_conv.onnx_runtime": "identity_conv.runtime.onnx_runtime",
    "identity_conv.tensor_io": "identity_conv.runtime.tensor_files",
    "identity_conv.special_values": "identity_conv.verify.special_values",
    "identity_conv.parity": "identity_conv.verify.parity",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The target module ran when it was imported."""


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
