"""Stage 3 (Python side): preflight a package, validate inputs against its recorded
spec, load it with aoti_load_package and run it."""

from __future__ import annotations

import platform
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..errors import InputError, PackageError
from ..package.host import host_cpu_flags, missing_cpu_flags
from ..ops.loader import LIBRARY_NAME, load_op_libraries, load_op_library
from ..package.spec import DTYPES, PackageSpec, dtype_name
from ..models.user import import_modules


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


def check_required_symbols(spec: PackageSpec) -> None:
    """Raise PackageError naming each op or class the package needs that is not
    registered in this process, and the library that provides it."""
    missing = []
    missing_python = []
    for op in spec.required_ops:
        namespace, name = op.split("::")
        if not hasattr(getattr(torch.ops, namespace), name):
            (missing_python if op in spec.python_only_ops else missing).append(f"op {op}")
    for cls in spec.required_classes:
        namespace, name = cls.split("::")
        try:
            torch._C._get_custom_class_python_wrapper(namespace, name)
        except RuntimeError:
            missing.append(f"class {cls}")
    problems = []
    if missing:
        libs = ", ".join(spec.op_libraries) or "the op library"
        problems.append(
            f"the package needs {' and '.join(missing)}, which no loaded library registers. "
            f"They are defined in {libs}; pass each library's path after the package or with --op-lib."
        )
    if missing_python:
        modules = ", ".join(spec.fake_modules) or "the module that defines them"
        problems.append(
            f"the package needs the Python-only {' and '.join(missing_python)}, which nothing in this "
            f"process defined. Import {modules} with --fake-module."
        )
    if problems:
        raise PackageError("\n".join(problems))


def _base_version(version: str) -> str:
    """"2.13.0+cpu" -> "2.13.0": the local suffix names the build, not the ABI."""
    return version.split("+", 1)[0]


def check_device(spec: PackageSpec) -> None:
    """Raise PackageError if the package targets a torch version, device, machine or
    CPU this process cannot run, instead of failing at load or dying with SIGILL."""
    if _base_version(spec.torch_version) != _base_version(torch.__version__):
        raise PackageError(
            f"the package was compiled with torch {spec.torch_version}, but this process runs "
            f"torch {torch.__version__}. AOTI packages are not portable across torch versions; "
            "re-export the package with this torch."
        )
    if spec.device != "cpu" and not spec.device.startswith("cuda"):
        raise PackageError(
            f"the package was compiled for device {spec.device!r}, which this runner does not support (cpu or cuda)."
        )
    if spec.device.startswith("cuda") and not torch.cuda.is_available():
        raise PackageError(
            f"the package was compiled for {spec.device}, but this process has no usable "
            "CUDA device. Run it on a CUDA machine, or re-export with --device cpu."
        )
    machine = spec.aoti.get("AOTI_MACHINE", "")
    if machine and machine != platform.machine():
        raise PackageError(
            f"the package was compiled for {machine}, but this host is {platform.machine()}. "
            "Re-export the package on this kind of machine."
        )
    missing = missing_cpu_flags(spec.cpu_flags, host_cpu_flags())
    if missing:
        raise PackageError(
            f"the package was compiled (with -march=native, AOTI ISA {spec.aoti.get('AOTI_CPU_ISA', '?')!r}) "
            f"on a CPU with {', '.join(missing)}, which this host lacks. Running it could crash with an "
            "illegal instruction. Re-export the package on this host or one with the same CPU features."
        )


def to_package_device(tensors: list[torch.Tensor], spec: PackageSpec) -> list[torch.Tensor]:
    """Tensor files hold CPU tensors; move them to the package's device."""
    return [tensor.to(spec.device) for tensor in tensors]


def make_random_inputs(spec: PackageSpec, seed: int) -> list[torch.Tensor]:
    """Seeded standard-normal inputs of the recorded example shapes (without them,
    dynamic dims take their minimum)."""
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for i, tensor_spec in enumerate(spec.inputs):
        if tensor_spec.dtype not in DTYPES:
            raise InputError(f"cannot generate a random input of dtype {tensor_spec.dtype}; pass --inputs FILE.")
        if i < len(spec.example_shapes):
            shape = list(spec.example_shapes[i])
        else:
            shape = [d.min for d in tensor_spec.dims]
        tensor = torch.randn(shape, generator=generator).to(DTYPES[tensor_spec.dtype])
        inputs.append(tensor.to(spec.device))
    return inputs


def validate_inputs(inputs: list[torch.Tensor], spec: PackageSpec) -> list[torch.Tensor]:
    """Check count, rank, each dim, dtype and device against the package spec.

    Returns:
        The inputs, made contiguous where they were not (AOTI reads dense buffers).

    Raises:
        InputError: one line naming the input, the expected and the actual value.
    """
    if len(inputs) != len(spec.inputs):
        raise InputError(f"wrong number of inputs: the package expects {len(spec.inputs)}, got {len(inputs)}.")
    ready = []
    for i, (tensor, expected) in enumerate(zip(inputs, spec.inputs)):
        name = f"input[{i}]"
        if tensor.dim() != len(expected.dims):
            raise InputError(
                f"{name}: expected rank {len(expected.dims)} {expected.shape_str()}, "
                f"got rank {tensor.dim()} {list(tensor.shape)}."
            )
        for d, (size, dim) in enumerate(zip(tensor.shape, expected.dims)):
            if not dim.min <= size <= dim.max:
                want = str(dim.min) if dim.is_static else f"a size in [{dim.min}, {dim.max}]"
                raise InputError(
                    f"{name}: dim {d} expected {want}, got {size} "
                    f"(shape {list(tensor.shape)}, package expects {expected.shape_str()})."
                )
        if dtype_name(tensor.dtype) != expected.dtype:
            raise InputError(
                f"{name}: expected dtype {expected.dtype}, got {dtype_name(tensor.dtype)}. Convert the "
                f"input or re-export the package with --dtype {dtype_name(tensor.dtype)}."
            )
        if tensor.device.type != torch.device(spec.device).type:
            raise InputError(f"{name}: expected a tensor on {spec.device}, got one on {tensor.device}.")
        if tensor.layout != torch.strided:
            raise InputError(f"{name}: expected a dense (strided) tensor, got layout {tensor.layout}.")
        # AOTI reads raw dense memory: lazy negation/conjugation bits must be applied first.
        ready.append(tensor.resolve_conj().resolve_neg().contiguous())
    for group in spec.shared_dims:
        (i0, d0), sizes = group[0], [ready[i].shape[d] for i, d in group]
        for (i, d), size in zip(group[1:], sizes[1:]):
            if size != sizes[0]:
                raise InputError(
                    f"input[{i}]: dim {d} must equal input[{i0}] dim {d0} (the package compiled them as one "
                    f"dynamic size), got {size} and {sizes[0]}."
                )
    return ready


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
    check_required_symbols(spec)
    check_device(spec)
    return LoadedPackage(path, spec)
