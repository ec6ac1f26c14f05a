"""A Triton model repository from a package: ``<repository>/<name>/config.pbtxt`` for
the `aoti` backend (triton_config.py: from the package's spec alone), and
``<repository>/<name>/<version>/``, a deploy bundle (package/bundle.py) that the
backend loads with the runners' trust policy; each version published atomically, old
ones removed out of a polling server's sight."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PackageError
from ..package.spec import PackageSpec
from .triton_config import TritonConfig, TritonTensor, VersionPolicy, check_model_name, triton_config, usage_error

CONFIG_NAME = "config.pbtxt"


def default_model_name(package: str | os.PathLike[str]) -> str:
    """The package file's stem (``model.pt2`` -> ``model``), or a bundle folder's name."""
    path = Path(package)
    return path.name if path.is_dir() else path.stem


@dataclass(frozen=True)
class RepositoryModel:
    """What ``write_repository`` wrote."""

    repository: Path
    name: str
    version: int
    config_path: Path  # <repository>/<name>/config.pbtxt
    bundle: Path  # <repository>/<name>/<version>/
    config: TritonConfig
    signed: bool
    files: list[str] = field(default_factory=list)  # the bundle's files
    warnings: list[str] = field(default_factory=list)
    versions: tuple[int, ...] = ()  # every version in the model's folder afterwards
    removed: tuple[int, ...] = ()  # versions removed to keep the newest ``keep_versions``

    @property
    def batchable(self) -> bool:
        return self.config.batchable

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @property
    def inputs(self) -> tuple[TritonTensor, ...]:
        return self.config.inputs

    @property
    def outputs(self) -> tuple[TritonTensor, ...]:
        return self.config.outputs


def _package_spec(package: Path) -> PackageSpec:
    """The spec of a .pt2 package or of a bundle's."""
    from ..package.archive import read_package_spec
    from ..package.bundle import is_bundle, read_layout
    from ..runtime import is_onnx_path

    if is_bundle(package):
        return read_package_spec(read_layout(package).package)
    if is_onnx_path(package):
        raise PackageError(
            f"{package} is an ONNX file; the Triton aoti backend serves AOTI packages (.pt2) and bundles",
            kind="not_found",
        )
    return read_package_spec(package)


def write_repository(
    package: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    *,
    name: str,
    version: int | None = None,
    keep_versions: int | None = None,
    version_policy: VersionPolicy | str | None = None,
    instances: int = 1,
    dynamic_batching: bool = True,
    max_queue_delay_us: int = 100,
    op_libraries: Sequence[str | os.PathLike[str]] = (),
    sign_key: str | os.PathLike[str] | None = None,
    intra_op_threads: int | None = None,
    trusted_key: str | os.PathLike[str] | None = None,
) -> RepositoryModel:
    """Publish a package as a version of a model in a Triton model repository: the
    bundle ``<repository>/<name>/<version>/`` and then
    ``<repository>/<name>/config.pbtxt``. Nothing is written if the package cannot be
    served.

    Publishing is atomic for a server that polls the repository: the bundle is
    written (and, with ``trusted_key``, verified as the backend will verify it) in a
    hidden staging folder beside the versions, which Triton ignores, and renamed into
    place only when whole; a version that already exists is swapped with the new one
    in one step (renameat2 RENAME_EXCHANGE) where the file system can. The config is
    replaced through a temporary file and a rename. Versions beyond the newest
    ``keep_versions`` are then removed, each renamed out of sight before deletion.

    Args:
        package: a .pt2 package or a bundle folder.
        repository: the model repository folder (made if missing).
        name: the model name.
        version: the version folder (1 or more); None: the next free number (one
            more than the newest version there, 1 in a new model).
        keep_versions: keep only this many newest versions (the new one included,
            and never removed); None keeps all.
        version_policy: the config's version_policy (a VersionPolicy, or text as
            ``VersionPolicy.parse`` takes it: ``latest:N``, ``all``,
            ``specific:V1,V2``); None writes none (Triton serves the latest).
        op_libraries, sign_key: as for ``write_bundle``.
        trusted_key: a PEM public key the backend verifies the bundle with (an
            unsigned bundle is then refused: a warning says so). Written into the
            config as an absolute path.
        instances, dynamic_batching, max_queue_delay_us, intra_op_threads: as for
            ``triton_config``.

    Returns:
        The paths written, the config and its warnings.

    Raises:
        PackageError: the package cannot be read or served (``triton_config``), or
            write_bundle's errors (libraries, destination, signing).
        AotiDeployError (kind usage): a bad name, version or option combination.
        OpLibraryError, SigningUnavailableError: as for ``write_bundle``.
    """
    from ..package.bundle import read_layout
    from ..package.bundle_writer import write_bundle
    from ..runtime.trust import verifies_with

    package = Path(package)
    repository = Path(repository)
    check_model_name(name)
    if version is not None and (type(version) is not int or version < 1):
        raise usage_error(f"invalid version {version!r}: a model version is a whole number, 1 or more")
    if keep_versions is not None and (type(keep_versions) is not int or keep_versions < 1):
        raise usage_error(f"invalid keep_versions {keep_versions!r}: keep at least the newest version (1 or more)")
    policy = VersionPolicy.parse(version_policy) if isinstance(version_policy, str) else version_policy
    model_dir = repository / name
    if version is None:
        version = max(model_versions(model_dir), default=0) + 1
    key_path: Path | None = None
    if trusted_key is not None:
        key_path = Path(trusted_key).resolve()
        if not key_path.is_file():
            raise PackageError(f"trusted key not found: {trusted_key}", kind="bad_key")

    spec = _package_spec(package)
    try:
        config = triton_config(
            spec,
            name,
            instances=instances,
            dynamic_batching=dynamic_batching,
            max_queue_delay_us=max_queue_delay_us,
            intra_op_threads=intra_op_threads,
            trusted_key=key_path,
            version_policy=policy,
        )
    except PackageError as error:
        raise PackageError(f"{package}: {error}", kind=error.kind) from error
    warnings = list(config.warnings)
    if sign_key is not None and key_path is None:
        warnings.append(
            "the bundle is signed, but the config names no trusted key, so the backend loads it unverified; "
            "pass --trusted-key PUB.pem to have it verified"
        )
    if sign_key is None and key_path is not None:
        warnings.append(
            "the config names a trusted key, but the bundle is not signed, so the backend will refuse to load it; "
            "pass --sign-key KEY.pem (the private half of the trusted key)"
        )

    # A signed bundle is verified before it is published; an unsigned one under a
    # trusted key is published with the warning above (the backend will refuse it).
    check = verifies_with(key_path) if sign_key is not None and key_path is not None else None
    bundle = write_bundle(package, list(op_libraries), model_dir / str(version), sign_key, check_staged=check)
    config_path = model_dir / CONFIG_NAME
    _write_text(config_path, config.text())
    layout = read_layout(bundle)
    removed: list[int] = []
    if keep_versions is not None:
        for old in sorted(model_versions(model_dir), reverse=True)[keep_versions:]:
            if old != version:  # the version just published is never the one removed
                _remove_version(model_dir, old)
                removed.append(old)
    return RepositoryModel(
        repository=repository,
        name=name,
        version=version,
        config_path=config_path,
        bundle=bundle,
        config=config,
        signed=layout.signed,
        files=layout.files,
        warnings=warnings,
        versions=tuple(model_versions(model_dir)),
        removed=tuple(sorted(removed)),
    )


def model_versions(model_dir: str | os.PathLike[str]) -> list[int]:
    """The version folders of a model, as Triton counts them: sub-folders named by a
    whole number >= 1 without a leading zero (hidden staging folders are not)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    return sorted(int(p.name) for p in model_dir.iterdir()
                  if p.is_dir() and p.name.isdigit() and not p.name.startswith("0"))


def _remove_version(model_dir: Path, version: int) -> None:
    """Take a version out of the repository: renamed to a hidden name first (a polling
    server sees it gone at once, never half-deleted), then deleted."""
    import shutil

    hidden = Path(tempfile.mkdtemp(dir=model_dir, prefix=f".{version}.", suffix=".removed"))
    try:
        os.rename(model_dir / str(version), hidden / str(version))
    except OSError as error:
        shutil.rmtree(hidden, ignore_errors=True)
        raise PackageError(f"could not remove version {version} of {model_dir}: {error.strerror or error}",
                           kind="bundle_output") from error
    shutil.rmtree(hidden, ignore_errors=True)


def _write_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then a rename."""
    temporary: Path | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
        ) as file:
            temporary = Path(file.name)
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise PackageError(f"could not write {path}: {error.strerror or error}", kind="bundle_output") from error
