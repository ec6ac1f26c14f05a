"""Loads the op library (libidentity_conv_ops.so) and registers what Python adds to
it: fake kernels for torch.export and torch.compile, a fake class for the torchbind
class, and the op's autograd formula. The schemas themselves live in C++ only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .errors import OpLibraryError
from .onnx_translations import register_onnx_class_route, register_onnx_translation

LIBRARY_NAME = "libidentity_conv_ops.so"
LIBRARY_ENV_VAR = "IDENTITY_CONV_OPS_LIB"
OP_NAME = "my_ops::identity_conv_op"
OUT_OP_NAME = "my_ops::identity_conv_op_out"
CLASS_NAME = "my_ops::IdentityConvClass"
CLASS_FORWARD_OP_NAME = "my_ops::identity_conv_class_forward"

_REPO_ROOT = Path(__file__).resolve().parents[2]
_loaded_path: Path | None = None


def library_candidates(path: str | os.PathLike[str] | None = None) -> list[Path]:
    """The places the loader looks for the library, in order.

    Args:
        path: an explicit path; when given it is the only candidate.

    Returns:
        The explicit path, else ``$IDENTITY_CONV_OPS_LIB``, then ``build/`` in the
        current directory and in the source checkout.
    """
    if path is not None:
        return [Path(path)]
    candidates = []
    if os.environ.get(LIBRARY_ENV_VAR):
        candidates.append(Path(os.environ[LIBRARY_ENV_VAR]))
    candidates.append(Path.cwd() / "build" / LIBRARY_NAME)
    candidates.append(_REPO_ROOT / "build" / LIBRARY_NAME)
    unique: list[Path] = []
    for candidate in candidates:
        if candidate.resolve() not in [u.resolve() for u in unique]:
            unique.append(candidate)
    return unique


def load_op_library(path: str | os.PathLike[str] | None = None) -> Path:
    """Load the op library once, then register its fakes. Safe to call again.

    Args:
        path: the library to load; defaults to the search in ``library_candidates``.

    Returns:
        The resolved path of the loaded library.

    Raises:
        OpLibraryError: no candidate exists, loading failed, or a different library
            file was already loaded in this process.
    """
    global _loaded_path
    if _loaded_path is not None and path is None:
        return _loaded_path
    candidates = library_candidates(path)
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        tried = "\n".join(f"  - {c}" for c in candidates)
        raise OpLibraryError(
            f"could not find the op library {LIBRARY_NAME}. Tried:\n{tried}\n"
            f"Build it with ./scripts/setup.sh, or pass its path "
            f"(--op-lib PATH, or set {LIBRARY_ENV_VAR})."
        )
    if _loaded_path is not None:
        if found.resolve() != _loaded_path:
            raise OpLibraryError(
                f"the op library is already loaded from {_loaded_path}; "
                f"cannot load a second copy from {found.resolve()} in the same process"
            )
        return _loaded_path
    if _has_schema(OP_NAME) and str(found.resolve()) not in _loaded_library_paths():
        # A second copy would register my_ops again, and torch aborts the process then.
        raise OpLibraryError(
            f"{OP_NAME} is already registered in this process by another library "
            f"({', '.join(_loaded_library_paths()) or 'not loaded through torch.ops'}); "
            f"cannot also load {found}. Load one copy only."
        )
    try:
        _load_and_record(found)
    except OSError as error:
        raise OpLibraryError(
            f"could not load the op library {found}: {error}\n"
            "Rebuild it against this environment's torch with ./scripts/setup.sh."
        ) from error
    if not _has_schema(OP_NAME):
        raise OpLibraryError(
            f"{found} loaded, but it does not register {OP_NAME}; pass the "
            f"{LIBRARY_NAME} built from csrc/"
        )
    _register_fakes()
    _loaded_path = found.resolve()
    return _loaded_path


def load_op_libraries(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """Load several op libraries in order: the project's through ``load_op_library``
    (which also registers its fakes), any other with ``torch.ops.load_library``.
    A library already loaded from the same file is not loaded again.

    Args:
        paths: the library files, e.g. from repeated ``--op-lib`` options.

    Returns:
        Their resolved paths.

    Raises:
        OpLibraryError: a file is missing or fails to load; the message names it.
    """
    global _loaded_path
    loaded = []
    for path in map(Path, paths):
        if path.name == LIBRARY_NAME:
            loaded.append(load_op_library(path))
            continue
        if not path.is_file():
            raise OpLibraryError(
                f"could not find the op library {path}.\nBuild it, or fix the path given with --op-lib."
            )
        resolved = path.resolve()
        if str(resolved) not in _loaded_library_paths():
            try:
                _load_and_record(resolved)
            except OSError as error:
                raise OpLibraryError(
                    f"could not load the op library {path}: {error}\n"
                    "Rebuild it against this environment's torch."
                ) from error
        # The project's ops under another file name still need their fakes.
        if _loaded_path is None and "my_ops" in _namespaces_by_library.get(resolved, set()):
            _register_fakes()
            _loaded_path = resolved
        loaded.append(resolved)
    return loaded


# The op namespaces each library registered when it loaded, to tell a package
# which libraries it needs.
_namespaces_by_library: dict[Path, set[str]] = {}


def _load_and_record(path: Path) -> None:
    before = set(torch._C._dispatch_get_all_op_names())
    torch.ops.load_library(str(path))
    added = set(torch._C._dispatch_get_all_op_names()) - before
    _namespaces_by_library[path.resolve()] = {name.split("::")[0] for name in added}


def libraries_for(qualnames: list[str]) -> list[str]:
    """File names of the loaded libraries that registered the namespaces of
    ``qualnames`` (ops or classes, ``ns::name``), sorted: the libraries a package
    that calls them needs. If a namespace has no known library (e.g. it was loaded
    by other means), every loaded library is named, to be safe."""
    names: set[str] = set()
    for qualname in qualnames:
        namespace = qualname.split("::")[0]
        owners = {path.name for path, spaces in _namespaces_by_library.items() if namespace in spaces}
        if not owners:
            return sorted({Path(p).name for p in torch.ops.loaded_libraries})
        names |= owners
    return sorted(names)


def _loaded_library_paths() -> list[str]:
    return sorted(str(Path(p).resolve()) for p in torch.ops.loaded_libraries)


def _has_schema(qualname: str) -> bool:
    namespace, name = qualname.split("::")
    return hasattr(getattr(torch.ops, namespace), name)


def identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Typed wrapper of ``my_ops::identity_conv_op``.

    Args:
        x: a float16, bfloat16, float32 or float64 tensor of any strides.

    Returns:
        A new contiguous tensor with exactly the bits of ``x``.
    """
    return torch.ops.my_ops.identity_conv_op(x)


def _fake_identity_conv(x: torch.Tensor) -> torch.Tensor:
    """Fake kernel of ``my_ops::identity_conv_op``: metadata only.

    Args:
        x: a fake tensor.

    Returns:
        An empty contiguous tensor of x's shape, dtype and device, like the real
        kernels return.
    """
    torch._check(
        x.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64),
        lambda: f"my_ops::identity_conv_op: expected a floating-point tensor "
        f"(Half, BFloat16, Float or Double), got {x.dtype}",
    )
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def identity_conv_out(x: torch.Tensor, out: torch.Tensor) -> None:
    """Typed wrapper of ``my_ops::identity_conv_op_out``.

    Args:
        x: a float16, bfloat16, float32 or float64 tensor of any strides.
        out: a tensor of x's shape, dtype and device (any strides); it receives
            exactly the bits of ``x``.
    """
    torch.ops.my_ops.identity_conv_op_out(x, out)


def _fake_identity_conv_out(x: torch.Tensor, out: torch.Tensor) -> None:
    """Fake kernel of ``my_ops::identity_conv_op_out``: it returns nothing; the
    schema's ``Tensor(a!) out`` tells tracing that ``out`` is written.

    Args:
        x: a fake tensor.
        out: a fake tensor of x's shape and dtype.
    """
    torch._check(out.shape == x.shape, lambda: f"expected out of shape {list(x.shape)}, got {list(out.shape)}")
    torch._check(out.dtype == x.dtype, lambda: f"expected out of dtype {x.dtype}, got {out.dtype}")


def _identity_conv_setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """The gradient of an identity needs nothing saved."""


def _identity_conv_backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    """d(identity)/dx is the identity: the incoming gradient, copied by the op itself,
    so the backward is made of an op torch.compile already understands."""
    return torch.ops.my_ops.identity_conv_op(grad)


def _fake_identity_conv_class_forward(x: torch.Tensor, channels: int) -> torch.Tensor:
    """Fake kernel of ``my_ops::identity_conv_class_forward``, the class's forward as
    an op over its flattened state (the route of the class into ONNX)."""
    return FakeIdentityConvClass(channels).forward(x)


class FakeIdentityConvClass:
    """Fake of the torchbind class ``my_ops::IdentityConvClass`` for tracing."""

    def __init__(self, channels: int) -> None:
        self.channels = channels

    @classmethod
    def __obj_unflatten__(cls, flattened: Any) -> "FakeIdentityConvClass":
        """Rebuild from the C++ ``__obj_flatten__`` output, ``(("channels", c),)``."""
        return cls(**dict(flattened))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Same metadata as the real forward: a contiguous copy of x."""
        torch._check(
            x.dim() >= 2 and x.shape[1] == self.channels,
            lambda: f"my_ops::IdentityConvClass.forward: expected an input of shape "
            f"[N, {self.channels}, ...], got {list(x.shape)}",
        )
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    def get_channels(self) -> int:
        return self.channels


_fakes_registered = False


def _register_fakes() -> None:
    global _fakes_registered
    if _fakes_registered:
        return
    torch.library.register_fake(OP_NAME)(_fake_identity_conv)
    torch.library.register_fake(OUT_OP_NAME)(_fake_identity_conv_out)
    torch.library.register_fake(CLASS_FORWARD_OP_NAME)(_fake_identity_conv_class_forward)
    torch.library.register_autograd(OP_NAME, _identity_conv_backward, setup_context=_identity_conv_setup_context)
    torch._library.register_fake_class(CLASS_NAME)(FakeIdentityConvClass)
    # ONNX: the op and the class's forward are identities, so ONNX's Identity is
    # exact; the class reaches ONNX through its op over the flattened state.
    register_onnx_translation(OP_NAME, _onnx_identity_conv)
    register_onnx_translation(CLASS_FORWARD_OP_NAME, _onnx_identity_conv_class_forward)
    register_onnx_class_route(CLASS_NAME, "forward", CLASS_FORWARD_OP_NAME)
    _fakes_registered = True


def _onnx_identity_conv(op: Any, x: Any) -> Any:
    """Portable ONNX translation of ``my_ops::identity_conv_op``: ``Identity``."""
    return op.Identity(x)


def _onnx_identity_conv_class_forward(op: Any, x: Any, channels: int) -> Any:
    """Portable ONNX translation of the class's forward. The channel check stays in
    the graph's input shape, whose channel dim is static."""
    return op.Identity(x)
