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

from .treespec import load_treespec
from ..errors import InputError, PackageError
from ..models.user import import_modules
from ..ops.loader import LIBRARY_NAME, load_op_libraries, load_op_library
from ..package.archive import no_loader_message, package_loader_class
from ..package.spec import PackageSpec, tensor_label
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
    here) to reach the same loader, and because its out spec fails to load when the
    model returns a type this process cannot import (``load_treespec`` falls back)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._specs: tuple[pytree.TreeSpec | None, pytree.TreeSpec | None] | None = None

    def specs(self) -> tuple[pytree.TreeSpec | None, pytree.TreeSpec | None]:
        """The model's input and output treespecs; None for one that cannot be
        rebuilt here."""
        if self._specs is None:
            call_spec = self.loader.get_call_spec()
            self._specs = (load_treespec(call_spec[0]), load_treespec(call_spec[1]))
        return self._specs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """As ``AOTICompiledModel.__call__``: the inputs flattened with the call
        spec (keyword arguments ordered by it, refused as it refuses them), the
        outputs unflattened with the out spec (a flat list where it cannot load)."""
        in_spec, out_spec = self.specs()
        if in_spec is None:
            flat_inputs = list(args)
        else:
            flat_inputs = pytree.tree_flatten((args, reorder_kwargs(kwargs, in_spec)))[0]
        flat_outputs = self.run_flat([x for x in flat_inputs if isinstance(x, torch.Tensor)])
        return flat_outputs if out_spec is None else pytree.tree_unflatten(flat_outputs, out_spec)

    def run_flat(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The package's tensors in, its flat outputs out (as the C++ runner runs it)."""
        return list(self.loader.boxed_run(list(tensors)))

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
        """Validate then run the package's tensor inputs, in order. Returns the flat
        outputs, as the C++ runner does."""
        if self._compiled is None:
            raise PackageError(f"the AOTI package {self.path} was closed; load it again to run it")
        ready = validate_inputs(inputs, self.spec)
        try:
            return self._compiled.run_flat(ready)
        except RuntimeError as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise PackageError(f"running the AOTI package {self.path} failed: {first_line}") from error

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the package as the model is called, args and kwargs nested as at
        export, and return the model's own output structure: a dict stays a dict, a
        tuple a tuple, a registered dataclass (e.g. transformers' ``ModelOutput``,
        when transformers is installed) the same type; a type that cannot be
        rebuilt here comes back as a dict by field name. A Python int, float or bool
        the model returns comes back as that Python value.

        Raises:
            InputError: arguments of another structure, a baked-in Python value
                other than the exported one, or tensors the spec refuses.
            PackageError: the package was closed, or running it failed.
        """
        if self._compiled is None:
            raise PackageError(f"the AOTI package {self.path} was closed; load it again to run it")
        in_spec, out_spec = self._compiled.specs()
        tensors = call_tensors(args, kwargs, in_spec, self.spec)
        outputs = python_values(self.run(tensors), self.spec)
        if out_spec is not None and out_spec.num_leaves == len(outputs):
            return pytree.tree_unflatten(outputs, out_spec)
        return outputs_by_name(outputs, self.spec)

    def close(self) -> None:
        """Drop the loader, which removes the folder it extracted the package into;
        a process that ends without Python's teardown (run_inference) calls this
        first. Running afterwards is an error."""
        self._compiled = None

    def __enter__(self) -> "LoadedPackage":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def call_tensors(
    args: tuple[Any, ...], kwargs: dict[str, Any], in_spec: pytree.TreeSpec | None, spec: PackageSpec
) -> list[torch.Tensor]:
    """The package's tensor inputs from a call as the model takes it, checked
    against the exported call: the same structure, and the Python values torch.export
    baked in (``spec.constant_inputs``) given as they were, or left out.

    Raises:
        InputError: what was expected, what was given, and how to fix it.
    """
    if in_spec is None:
        if kwargs:
            raise InputError(f"this package's input structure cannot be read here; pass its {len(spec.inputs)} "
                             "tensor input(s) positionally")
        leaves = list(args)
    else:
        try:
            ordered = reorder_kwargs(kwargs, in_spec)
        except (ValueError, AssertionError):
            children = _children(in_spec)
            expected = children[1].context if len(children) == 2 else []
            raise InputError(
                f"the package takes keyword argument(s) {_names(expected)}, got {_names(sorted(kwargs))}; "
                "pass the keywords the model was exported with"
            ) from None
        leaves, given = pytree.tree_flatten((tuple(args), ordered))
        if given != in_spec:
            raise InputError(
                f"the call does not have the structure the package was exported with: expected {_call_text(in_spec)}, "
                f"got {_call_text(given)}. Pass the arguments as at export (tensor inputs: "
                f"{', '.join(t.name or f'input {i}' for i, t in enumerate(spec.inputs))})"
            )
    for constant in spec.constant_inputs:
        index = constant["index"]
        if index < len(leaves) and not isinstance(leaves[index], torch.Tensor) and leaves[index] != constant["value"]:
            raise InputError(
                f"input {constant['name']} was {constant['value']!r} at export, and torch.export baked that value "
                f"into the package; got {leaves[index]!r}. Export again with the value you need"
            )
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _children(spec: pytree.TreeSpec) -> list[pytree.TreeSpec]:
    # torch 2.14 deprecates children_specs for children().
    return list(spec.children()) if hasattr(spec, "children") else list(spec.children_specs)


def _names(names: Any) -> str:
    return "(" + ", ".join(str(name) for name in names) + ")" if names else "(none)"


def _call_text(spec: pytree.TreeSpec) -> str:
    """A call's structure in a few words: "2 positional argument(s) and keyword(s)
    (mask)"."""
    children = _children(spec)
    if spec.type is not tuple or len(children) != 2:
        return str(spec)
    positional, keywords = children
    return f"{positional.num_children} positional argument(s) and keyword(s) {_names(keywords.context or [])}" + (
        f", {spec.num_leaves} leaves" if spec.num_leaves else ""
    )


def python_values(outputs: list[torch.Tensor], spec: PackageSpec) -> list[Any]:
    """The flat outputs as the model returns them: each output the spec records as a
    Python scalar (kind int, float or bool: a 0-d int64, float64 or bool tensor) as
    that Python value, every other one as it is."""
    if len(spec.outputs) != len(outputs) or not any(t.is_scalar for t in spec.outputs):
        return outputs
    return [tensor.item() if t.is_scalar else tensor for tensor, t in zip(outputs, spec.outputs)]


def scalar_output_lines(outputs: list[torch.Tensor], spec: PackageSpec) -> list[str]:
    """One line per output the spec records as a Python scalar, as both runners print
    it after a run: "output[1] (count): int 9", a float with 17 significant digits
    (%.17g, which reads back as the same float), a bool as true or false. None when
    the outputs do not line up with the spec's (cpp_runtime/core/aoti_package.cpp's
    scalar_output_lines says the same)."""
    if len(spec.outputs) != len(outputs):
        return []
    lines = []
    for k, (tensor, t) in enumerate(zip(outputs, spec.outputs)):
        if not t.is_scalar or tensor.numel() != 1:
            continue
        value = tensor.item()
        shown = f"{float(value):.17g}" if t.kind == "float" else ("true" if value else "false") if t.kind == "bool" \
            else str(int(value))
        lines.append(f"{tensor_label('output', k, spec.outputs)}: {t.kind} {shown}")
    return lines


def outputs_by_name(outputs: list[Any], spec: PackageSpec) -> dict[str, Any]:
    """The outputs as a dict by the spec's names (``output_0``... where none)."""
    names = [t.name for t in spec.outputs] if len(spec.outputs) == len(outputs) else []
    if not all(names):
        names = [f"output_{k}" for k in range(len(outputs))]
    return dict(zip(names, outputs))


def load_package(path: str | Path, spec: PackageSpec) -> LoadedPackage:
    """Preflight (device, required ops and classes) then load the package.

    Call ``load_op_library`` first; ``spec`` comes from ``read_package_spec``.
    """
    host = this_host()
    check_runs_here(spec, host)
    check_required_symbols(spec, host)
    return LoadedPackage(path, spec)
