"""Export a PyTorch model with custom C++/CUDA ops, compile it with AOTInductor,
and run it from Python or from a C++ binary with no Python, verified bit-for-bit.

    import aoti_deploy as ad
    pkg = ad.export(model, (x,), {"mask": m}, dynamic_shapes={"x": {0: ad.Dim("batch", max=64)}, "mask": {0: ...}})
    ad.load(pkg.path)(x, mask=m)   # the model's own output structure
    pkg.verify((x,), {"mask": m})  # against eager, under the recorded tolerance
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_attributes

from .errors import (
    AotiDeployError,
    CompileError,
    ExportError,
    InputError,
    ModelError,
    OpLibraryError,
    PackageError,
    VerificationError,
)

# The op layer imports torch; it loads on first use (PEP 562), so the CLIs' --help
# and the light modules (errors, locate) start without it.
_LAZY = {
    "identity_conv": ".ops",
    "load_op_library": ".ops",
    "Dim": ".api",
    "export": ".api",
    "load": ".api",
    "Package": ".api",
    "Report": ".api",
    "OutputCheck": ".api",
    "BenchmarkResult": ".api",
    "BenchRow": ".api",
    "BuildResult": ".api",
    "ExportOptions": ".api",
    "IdentitySource": ".api",
    "FactorySource": ".api",
    "deploy_to_triton": ".api",
    "serve_repository": ".api",
    "Tolerance": ".package.spec",
    "PackageSpec": ".package.spec",
    "KubernetesSettings": ".serve.kubernetes",
}

if TYPE_CHECKING:
    from .api import (
        BenchmarkResult, BenchRow, BuildResult, Dim, ExportOptions, FactorySource, IdentitySource, OutputCheck,
        Package, Report, deploy_to_triton, export, load, serve_repository,
    )
    from .ops import identity_conv, load_op_library
    from .package.spec import PackageSpec, Tolerance
    from .serve.kubernetes import KubernetesSettings


_SUBPACKAGES = ("api", "bench", "cli", "compiler", "models", "ops", "package", "runtime", "verify", "errors", "locate")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBPACKAGES)


__all__ = [
    "AotiDeployError",
    "BenchRow",
    "BenchmarkResult",
    "BuildResult",
    "Dim",
    "ExportOptions",
    "FactorySource",
    "IdentitySource",
    "KubernetesSettings",
    "OutputCheck",
    "Package",
    "PackageSpec",
    "Report",
    "Tolerance",
    "deploy_to_triton",
    "export",
    "load",
    "serve_repository",
    "CompileError",
    "ExportError",
    "InputError",
    "ModelError",
    "OpLibraryError",
    "PackageError",
    "VerificationError",
    "identity_conv",
    "load_op_library",
]
