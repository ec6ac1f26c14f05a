"""Stage 3 (Python side): load a package's op libraries, preflight it, load it with
AOTI's package loader and run it on validated inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
# What AOTICompiledModel orders keyword inputs with; part of torch.export, which
# `import torch` has loaded already (no Dynamo).
from torch.export._tree_utils import reorder_kwargs

from ..errors import PackageError
from ..models.user import import_modules
from ..ops.loader import LIBRARY_NAME, load_op_libraries, load_op_library
from ..package.archive import no_loader_message, package_loader_class
from ..package.spec import PackageSpec
from .preflight import check_required_symbols, check_runs_here, this_host
from .validation import validate_inputs


def load_package_libraries(
    spec: PackageSpec, paths: list[Path], fake_modules: list[str]
) -> list[Path]:
    """Load what a package needs before it runs: the given op libraries (without
    any, the project's library from its default places, if the package needs it),
    then the modules that register fakes or Python-only ops.

    Returns:
        The loaded libraries' paths.

    Raises:
        OpLibraryError, ModelError: a library or module failed to load.
    """
    if paths:
        loaded = load_op_libraries(paths)
    elif LIBRARY_NAME in spec.op_libraries:
        loaded = [load_op_library()]
    else:
        loaded = []
    import_modules(fake_modules)
    return loaded


def to_package_device(tensors: list[torch.Tensor], spec: PackageSpec) -> list[torch.Tensor]:
    """Tensor files hold CPU tensors; move them to the package's device."""
    return [tensor.to(spec.device) for tensor in tensors]


class CompiledPackage:
    """A package model on torch's C++ loader, called as ``aoti_load_package``'s
    ``AOTICompiledModel`` is: the inputs flattened with the package's call spec,
    ``boxed_run``, the outputs unflattened with its out spec. Built here because
    ``aoti_load_package`` imports Dynamo and Inductor (1.7 to 2.2 s of a cold start
    here) to reach the same loader."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._specs: tuple[pytree.TreeSpec, pytree.TreeSpec] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._specs is None:
            call_spec = self.loader.get_call_spec()
            self._specs = (pytree.treespec_loads(call_spec[0]), pytree.treespec_loads(call_spec[1]))
        in_spec, out_spec = self._specs
        flat_inputs = pytree.tree_flatten((args, reorder_kwargs(kwargs, in_spec)))[0]
        flat_inputs = [x for x in flat_inputs if isinstance(x, torch.Tensor)]
        flat_outputs = self.loader.boxed_run(flat_inputs)
        return pytree.tree_unflatten(flat_outputs, out_spec)

    def get_metadata(self) -> dict[str, str]:
        return self.loader.get_metadata()


def load_compiled(path: str | Path) -> CompiledPackage:
    """The package's model, callable like ``aoti_load_package``'s, and failing with
    the same RuntimeError, on torch's C++ loader. A torch without the binding gets a
    PackageError: ``aoti_load_package`` builds the same loader, so it cannot help.

    Call after the op libraries are loaded: the loader resolves the package's
    torchbind classes and custom ops when it is constructed."""
    loader_class = package_loader_class()
    if loader_class is None:
        raise PackageError(f"{no_loader_message()} (needed to load {path}).")
    # aoti_load_package's defaults: model "model", not single-threaded, one runner,
    # the default device index.
    return CompiledPackage(loader_class(str(path), "model", False, 1, -1))


class LoadedPackage:
    """A package loaded in this process (``load_compiled``)."""

    def __init__(self, path: str | Path, spec: PackageSpec) -> None:
        self.path = Path(path)
        self.spec = spec
        try:
            self._compiled = load_compiled(self.path)
        except RuntimeError as error:
            first_line = str(error).strip().splitlines()[0]
            raise PackageError(f"could not load the AOTI package {self.path}: {first_line}") from error

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Validate then run. Returns the outputs as a list."""
        if self._compiled is None:
            raise PackageError(f"the AOTI package {self.path} was closed; load it again to run it")
        ready = validate_inputs(inputs, self.spec)
        try:
            outputs = self._compiled(*ready)
        except RuntimeError as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PackageError(f"running the AOTI package {self.path} failed: {first_line}") from error
        # Python gets the model's output structure back; C++ gets the flat list.
        return pytree.tree_leaves(outputs)

    def close(self) -> None:
        """Drop the loader, which removes the folder it extracted the package into;
        a process that ends without Python's teardown (run_inference) calls this
        first. Running afterwards is an error."""
        self._compiled = None

    def __enter__(self) -> "LoadedPackage":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def load_package(path: str | Path, spec: PackageSpec) -> LoadedPackage:
    """Preflight (device, required ops and classes) then load the package.

    Call ``load_op_library`` first; ``spec`` comes from ``read_package_spec``.
    """
    host = this_host()
    check_runs_here(spec, host)
    check_required_symbols(spec, host)
    return LoadedPackage(path, spec)
