"""Module paths from before the stage layout, kept importable: a user's fakes module
may ``from aoti_deploy.onnx_translations import register_onnx_translation``. Each
old path is an alias of the module that now holds its code (the same module object)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "aoti_deploy.model": "aoti_deploy.models.identity",
    "aoti_deploy.user_model": "aoti_deploy.models.user",
    "aoti_deploy.train": "aoti_deploy.models.train",
    "aoti_deploy.export": "aoti_deploy.compiler.export",
    "aoti_deploy.optimize": "aoti_deploy.compiler.optimize",
    "aoti_deploy.compile": "aoti_deploy.compiler.compile",
    "aoti_deploy.cache": "aoti_deploy.compiler.cache",
    "aoti_deploy.pipeline": "aoti_deploy.compiler.pipeline",
    "aoti_deploy.onnx_export": "aoti_deploy.compiler.onnx_export",
    "aoti_deploy.onnx_translations": "aoti_deploy.compiler.onnx_translations",
    "aoti_deploy.host": "aoti_deploy.package.host",
    "aoti_deploy.onnx_runtime": "aoti_deploy.runtime.onnx_runtime",
    "aoti_deploy.tensor_io": "aoti_deploy.runtime.tensor_files",
    "aoti_deploy.special_values": "aoti_deploy.verify.special_values",
    "aoti_deploy.parity": "aoti_deploy.verify.parity",
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
