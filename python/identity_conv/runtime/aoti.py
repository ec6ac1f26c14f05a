"""Stage 3 (Python side): load a package's op libraries, preflight it, load it with
AOTI's package loader and run it on validated inputs."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..errors import PackageError
from ..models.user import import_modules
from ..ops.loader import LIBRARY_NAME, load_op_libraries, load_op_library
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


class LoadedPackage:
    """A package loaded in this process with aoti_load_package."""

    def __init__(self, path: str | Path, spec: PackageSpec) -> None:
        self.path = Path(path)
        self.spec = spec
        try:
            self._compiled = torch._inductor.aoti_load_package(str(self.path))
        except RuntimeError as error:
            first_line = str(error).strip().splitlines()[0]
            raise PackageError(f"could not load the AOTI package {self.path}: {first_line}") from error

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Validate then run. Returns the outputs as a list."""
        ready = validate_inputs(inputs, self.spec)
        try:
            outputs = self._compiled(*ready)
        except RuntimeError as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PackageError(f"running the AOTI package {self.path} failed: {first_line}") from error
        # Python gets the model's output structure back; C++ gets the flat list.
        return pytree.tree_leaves(outputs)


def load_package(path: str | Path, spec: PackageSpec) -> LoadedPackage:
    """Preflight (device, required ops and classes) then load the package.

    Call ``load_op_library`` first; ``spec`` comes from ``read_package_spec``.
    """
    host = this_host()
    check_runs_here(spec, host)
    check_required_symbols(spec, host)
    return LoadedPackage(path, spec)
