"""Deploy bundles: a folder holding model.pt2, the op libraries its spec records and,
optionally, model.sig (an OpenSSF Model Signing signature, see signing.py). This module
checks a bundle's layout and copies it into a private folder before it is verified;
bundle_writer.py writes bundles and bundle_report.py shows them.
cpp_runtime/core/bundle.cpp applies the same layout rule, in the same words."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..errors import PackageError
from .private_folder import BUNDLE_COPY_PREFIX, PrivateFolder
from .spec import PackageSpec

PACKAGE_NAME = "model.pt2"
SIGNATURE_NAME = "model.sig"
TRUSTED_KEY_ENV = "AOTI_DEPLOY_TRUSTED_KEY"
LIBRARY_SUFFIX = ".so"

_CHUNK = 1 << 20


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """A bundle is given as its folder; anything else is a bare package (or .onnx)."""
    return Path(path).is_dir()


def _not_regular(shown: str | Path, name: str) -> PackageError:
    return PackageError(
        f"{shown}/{name}: not a regular file (a symlink, directory or other); a bundle holds only regular files",
        kind="bundle_layout",
    )


def _allowed_name(name: str) -> bool:
    return name in (PACKAGE_NAME, SIGNATURE_NAME) or name.endswith(LIBRARY_SUFFIX)


def _unexpected(shown: str | Path, name: str) -> PackageError:
    return PackageError(
        f"{shown}/{name}: unexpected file in the bundle; a bundle holds model.pt2, the op libraries (.so) its "
        "package records, and model.sig",
        kind="bundle_layout",
    )


@dataclass(frozen=True)
class BundleLayout:
    """A bundle's files, checked for shape only (``read_layout``)."""

    dir: Path  # where the files are: the bundle, or its private copy
    shown: Path  # the bundle the user named, for messages
    files: list[str] = field(default_factory=list)  # every file, sorted
    libraries: list[str] = field(default_factory=list)  # the .so files, sorted

    @property
    def package(self) -> Path:
        return self.dir / PACKAGE_NAME

    @property
    def signed(self) -> bool:
        return SIGNATURE_NAME in self.files

    @property
    def signature(self) -> Path | None:
        return self.dir / SIGNATURE_NAME if self.signed else None


def read_layout(directory: str | os.PathLike[str], shown: str | os.PathLike[str] | None = None) -> BundleLayout:
    """Check the layout rule, before anything in the bundle is read: every entry a
    regular file (by lstat: a symlink is refused whatever it points at), named
    model.pt2, model.sig or *.so, and model.pt2 among them.

    Args:
        directory: the bundle (or its private copy).
        shown: how messages name the bundle (default ``directory``).

    Raises:
        PackageError (kind bundle_layout): the first entry, by name, that breaks the rule.
    """
    directory = Path(directory)
    shown_dir = directory if shown is None else Path(shown)
    try:
        names = sorted(os.listdir(directory))
    except OSError as error:
        raise PackageError(
            f"could not read the bundle {shown_dir}: {error.strerror or error}", kind="bundle_layout"
        ) from error
    for name in names:
        try:
            mode = os.lstat(directory / name).st_mode
        except OSError as error:
            raise PackageError(
                f"{shown_dir}/{name}: could not read it ({error.strerror or error})", kind="bundle_layout"
            ) from error
        if not stat.S_ISREG(mode):
            raise _not_regular(shown_dir, name)
        if not _allowed_name(name):
            raise _unexpected(shown_dir, name)
    if PACKAGE_NAME not in names:
        raise PackageError(f"{shown_dir}: not a bundle: no {PACKAGE_NAME} in it", kind="bundle_layout")
    return BundleLayout(
        dir=directory,
        shown=shown_dir,
        files=names,
        libraries=[name for name in names if name.endswith(LIBRARY_SUFFIX)],
    )


def recorded_libraries(spec: PackageSpec) -> list[str]:
    """The file names of the op libraries the spec records, in its order (the load order)."""
    return [Path(name).name for name in spec.op_libraries]


def check_libraries(layout: BundleLayout, spec: PackageSpec) -> list[Path]:
    """The bundle's op libraries, in the order the spec records them (the order they
    load in), under ``layout.dir``. The bundle must hold every recorded library and no
    other.

    Raises:
        PackageError (kind bundle_layout): a recorded library is missing, or a .so in
            the bundle is not recorded.
    """
    recorded = recorded_libraries(spec)
    for name in recorded:
        if name not in layout.libraries:
            raise PackageError(
                f"{layout.shown}: the package needs {name}, which the bundle does not hold; rebuild the bundle "
                f"with: bundle PACKAGE --output DIR --op-lib PATH/{name}",
                kind="bundle_layout",
            )
    for name in layout.libraries:
        if name not in recorded:
            raise PackageError(
                f"{layout.shown}/{name}: the package does not record this op library (it records: "
                f"{', '.join(recorded) or 'none'}); remove it or rebuild the bundle",
                kind="bundle_layout",
            )
    return [layout.dir / name for name in recorded]


class PrivateCopy(NamedTuple):
    """A bundle copied into a private folder, with what was copied."""

    dir: Path
    digests: dict[str, str]  # file name -> hex SHA-256 of the bytes written
    sizes: dict[str, int]  # file name -> bytes


def _copy_failed(what: str, path: str | Path, error: OSError) -> PackageError:
    return PackageError(
        f"could not copy the bundle into a private folder: {what} {path}: {error.strerror or error}",
        kind="bundle_copy",
    )


@contextmanager
def private_copy(directory: str | os.PathLike[str], shown: str | os.PathLike[str] | None = None) -> Iterator[PrivateCopy]:
    """Copy a bundle into a new private folder (mkdtemp, 0700, under $TMPDIR, named by
    this process: see private_folder.py), and remove it on exit. What is verified and loaded is the copy, so nobody can change
    it between the check and the load; the original's names can change meanwhile,
    but each file is opened without following links (O_NOFOLLOW, relative to the
    folder opened once) and must be a regular file by fstat, and the digests are of
    the bytes written to the copy.

    Args:
        directory: the bundle.
        shown: how messages name it (default ``directory``).

    Yields:
        The copy's folder, its files' SHA-256 and sizes.

    Raises:
        PackageError: kind bundle_layout (a file is not a regular file, or has a name a
            bundle does not hold), or bundle_copy (reading or writing failed).
    """
    directory = Path(directory)
    shown_dir = directory if shown is None else Path(shown)
    folder = PrivateFolder(BUNDLE_COPY_PREFIX)
    copy_dir = folder.path
    try:
        try:
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as error:
            raise _copy_failed("opening", directory, error) from error
        try:
            digests, sizes = _copy_files(dir_fd, shown_dir, copy_dir)
        finally:
            os.close(dir_fd)
        if PACKAGE_NAME not in digests:
            raise PackageError(f"{shown_dir}: not a bundle: no {PACKAGE_NAME} in it", kind="bundle_layout")
        yield PrivateCopy(copy_dir, digests, sizes)
    finally:
        folder.remove()


def _copy_files(dir_fd: int, shown_dir: Path, copy_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    digests: dict[str, str] = {}
    sizes: dict[str, int] = {}
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    for name in sorted(os.listdir(dir_fd)):
        source = f"{shown_dir}/{name}"
        try:
            # O_NONBLOCK: opening a fifo must not wait for a writer; it is refused below.
            in_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:  # a symlink
                raise _not_regular(shown_dir, name) from error
            raise _copy_failed("opening", source, error) from error
        try:
            if not stat.S_ISREG(os.fstat(in_fd).st_mode):
                raise _not_regular(shown_dir, name)
            if not _allowed_name(name):
                raise _unexpected(shown_dir, name)
            target = copy_dir / name
            try:
                out_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as error:
                raise _copy_failed("creating", target, error) from error
            digest = hashlib.sha256()
            size = 0
            try:
                while True:
                    try:
                        got = os.readv(in_fd, [buffer])
                    except OSError as error:
                        raise _copy_failed("reading", source, error) from error
                    if got == 0:
                        break
                    chunk = view[:got]
                    done = 0
                    while done < got:
                        try:
                            done += os.write(out_fd, chunk[done:])
                        except OSError as error:
                            raise _copy_failed("writing", target, error) from error
                    digest.update(chunk)
                    size += got
            finally:
                os.close(out_fd)
            digests[name] = digest.hexdigest()
            sizes[name] = size
        finally:
            os.close(in_fd)
    return digests, sizes


class FileDigest(NamedTuple):
    name: str
    size: int
    sha256: str


def file_digests(directory: str | os.PathLike[str]) -> list[FileDigest]:
    """Each file of a bundle (model.sig included), sorted by name, with its size and
    SHA-256, for showing. Read without following links."""
    directory = Path(directory)
    found = []
    for name in sorted(os.listdir(directory)):
        # O_NONBLOCK: a name swapped for a FIFO cannot block the open (as in the copy).
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise _not_regular(directory, name)
        with os.fdopen(fd, "rb") as file:
            digest = hashlib.sha256()
            size = 0
            for chunk in iter(lambda: file.read(_CHUNK), b""):
                digest.update(chunk)
                size += len(chunk)
        found.append(FileDigest(name, size, digest.hexdigest()))
    return found
