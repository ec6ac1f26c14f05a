"""Open a package, a bundle or an .onnx file for running in this process, in the one
order both the Python API (``aoti_deploy.load``) and ``run_inference`` follow: the
trust policy first (nothing native loads before it), then what the spec alone can
refuse, then the op libraries, then the model."""

from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .._closing import ClosedOnExit
from ..package.private_folder import remove_orphaned_folders
from . import is_onnx_path
from .trust import OpenedModel, TrustPolicy, open_model, refuse_library_arguments


@dataclass
class Session(ClosedOnExit):
    """A model loaded in this process: what the trust policy opened, the op
    libraries loaded for it and the runnable model (a LoadedPackage, or an
    OnnxSession for an .onnx file). Close it to unload the package and remove a
    verified bundle's private copy."""

    opened: OpenedModel
    libraries: list[Path]
    model: Any
    onnx: bool
    _cleanup: ExitStack = field(default_factory=ExitStack, repr=False)

    @property
    def spec(self) -> Any:
        return self.opened.spec

    def close(self) -> None:
        self._cleanup.close()



def open_session(
    path: str | os.PathLike[str],
    *,
    op_libraries: Sequence[str | os.PathLike[str]] = (),
    fake_modules: Sequence[str] = (),
    policy: TrustPolicy,
) -> Session:
    """Apply the trust policy to ``path``, check the spec against this host, load
    the op libraries (a bundle's own, else ``op_libraries``, else the project's if
    the package needs it) and the fake modules, then the model.

    Raises:
        PackageError, OpLibraryError, ModelError, AotiDeployError: from each step,
            with the runners' messages.
    """
    from .aoti import load_package, load_package_libraries
    from .preflight import check_runs_here, this_host

    # What runners killed while loading left in $TMPDIR (their owners are gone) goes first.
    remove_orphaned_folders()
    given = [Path(p) for p in op_libraries]
    refuse_library_arguments(path, given)
    cleanup = ExitStack()
    try:
        opened = cleanup.enter_context(open_model(path, policy))
        onnx = is_onnx_path(opened.package)
        if not onnx:
            # What the spec alone can refuse is refused before any op library loads,
            # in the same order as aoti_runner.
            check_runs_here(opened.spec, this_host())
        libraries = load_package_libraries(
            opened.spec, opened.op_libraries if opened.is_bundle else given, list(fake_modules)
        )
        if onnx:
            from .onnx_runtime import load_onnx

            model = load_onnx(opened.package, opened.spec)
        else:
            # Closed with the session: the loader's extracted files go with it.
            model = cleanup.enter_context(load_package(opened.package, opened.spec))
        return Session(opened, libraries, model, onnx, cleanup)
    except BaseException:
        cleanup.close()
        raise
