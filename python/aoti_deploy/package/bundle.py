"""Deploy bundles: a folder holding model.pt2, the op libraries its spec records and,
optionally, model.sig (an OpenSSF Model Signing signature, see signing.py). This module
checks a bundle's layout, copies it into a private folder before it is verified, and
writes bundles. cpp_runtime/core/bundle.cpp applies the same layout rule, in the same
words."""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..errors import PackageError
from .spec import PackageSpec

if TYPE_CHECKING:  # signing.py imports this module's names
    from .signing import SignedManifest

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
    """Copy a bundle into a new private folder (mkdtemp, 0700, under $TMPDIR), and
    remove it on exit. What is verified and loaded is the copy, so nobody can change
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
    copy_dir = Path(tempfile.mkdtemp(prefix="aoti_deploy_bundle_"))
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
        shutil.rmtree(copy_dir, ignore_errors=True)


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


# --- Showing a bundle (inspect) ---------------------------------------------------


@dataclass
class BundleReport:
    """What inspect shows of a bundle: its signature (read, and verified only when
    ``verified_with`` is set) and each file's digest against the signed one."""

    dir: Path
    signature: SignedManifest | None  # None when unsigned or unreadable
    signature_error: str | None
    verified_with: str | None
    files: list[tuple[str, str, str]]  # (name, sha256 or "", state)

    def rows(self) -> list[tuple[str, str]]:
        """inspect's rows, in aoti_runner --inspect's words."""
        rows = [("bundle", str(self.dir))]
        if self.signature_error is not None:
            rows.append(("signature", self.signature_error))
        elif self.signature is None:
            rows.append(("signature", "not signed"))
        else:
            described = f"{SIGNATURE_NAME}, key hint {self.signature.key_hint or 'none'}, {len(self.signature.files)} files"
            if self.verified_with is not None:
                described += f", verified with {self.verified_with}"
            else:
                described += " (not verified: the runners verify it with --trusted-key)"
            rows.append(("signature", described))
        for name, digest, state in self.files:
            if state == "missing":
                rows.append((f"sha256 {name}", f"missing (signed {digest})"))
            else:
                rows.append((f"sha256 {name}", digest + (f" ({state})" if state else "")))
        return rows

    def to_json(self) -> dict[str, object]:
        signature: dict[str, object] | None = None
        if self.signature_error is not None:
            signature = {"file": SIGNATURE_NAME, "error": self.signature_error}
        elif self.signature is not None:
            signature = {
                "file": SIGNATURE_NAME,
                "key_hint": self.signature.key_hint,
                "subject": {"name": self.signature.subject_name, "sha256": self.signature.subject_sha256},
                "method": self.signature.method,
                "files": len(self.signature.files),
                "verified": self.verified_with is not None,
                "trusted_key": self.verified_with,
            }
        return {
            "dir": str(self.dir),
            "signed": self.signature is not None or self.signature_error is not None,
            "signature": signature,
            "files": [{"name": name, "sha256": digest, "state": state} for name, digest, state in self.files],
        }


def describe_bundle(
    layout: BundleLayout, verified: SignedManifest | None = None, verified_with: str | None = None
) -> BundleReport:
    """The bundle's files against its signature, read without checking it, unless
    ``verified`` (the SignedManifest a verification returned) is given.

    States: "as signed", "differs from the signature", "not in the signature",
    "missing" (signed, but not in the bundle), or "" for an unsigned bundle.
    """
    from .signing import read_signature

    signature = verified
    error = None
    if signature is None and layout.signed:
        try:
            signature = read_signature(layout.dir / SIGNATURE_NAME, f"{layout.shown}/{SIGNATURE_NAME}")
        except PackageError as problem:
            error = str(problem)
    signed = signature.digests() if signature is not None else {}
    files: list[tuple[str, str, str]] = []
    present = set()
    for found in file_digests(layout.dir):
        if found.name == SIGNATURE_NAME:
            continue
        present.add(found.name)
        if signature is None:
            state = ""
        elif found.name not in signed:
            state = "not in the signature"
        elif signed[found.name] == found.sha256:
            state = "as signed"
        else:
            state = "differs from the signature"
        files.append((found.name, found.sha256, state))
    for name, digest in signed.items():
        if name not in present:
            files.append((name, digest, "missing"))
    return BundleReport(layout.shown, signature, error, verified_with if verified is not None else None, files)


# --- Writing a bundle ---------------------------------------------------------------


def _choose_libraries(
    package: Path, spec: PackageSpec, given: Sequence[Path], bundled: dict[str, Path]
) -> list[tuple[str, Path]]:
    """(file name, source) of each library the spec records, in its order: a given
    one of that file name, else the source bundle's, else, for the project's own
    library, the default one (as run_inference finds it)."""
    from ..locate import LIBRARY_NAME, op_library_path

    recorded = recorded_libraries(spec)
    by_name: dict[str, Path] = {}
    for path in given:
        path = Path(path)
        if not path.is_file():
            raise PackageError(f"op library not found: {path} (given with --op-lib)", kind="bundle_layout")
        if path.name not in recorded:
            raise PackageError(
                f"{path}: the package {package} does not record this op library (it records: "
                f"{', '.join(recorded) or 'none'}); pass only the op libraries it records",
                kind="bundle_layout",
            )
        if path.name in by_name and by_name[path.name].resolve() != path.resolve():
            raise PackageError(
                f"two op libraries named {path.name} were given ({by_name[path.name]} and {path}); a bundle holds "
                "one of each",
                kind="bundle_layout",
            )
        by_name[path.name] = path
    chosen = []
    for name in recorded:
        if name in by_name:
            chosen.append((name, by_name[name]))
        elif name in bundled:
            chosen.append((name, bundled[name]))
        elif name == LIBRARY_NAME:
            chosen.append((name, op_library_path()))
        else:
            raise PackageError(
                f"the package {package} needs the op library {name}; pass its path with --op-lib PATH/{name}",
                kind="bundle_layout",
            )
    return chosen


def _check_destination(dest: Path) -> None:
    """A bundle is written over nothing, an empty folder or another bundle, never
    over a folder that holds anything else."""
    if not dest.exists() and not dest.is_symlink():
        return
    if dest.is_symlink() or not dest.is_dir():
        raise PackageError(f"{dest} exists and is not a folder; choose another --output", kind="bundle_output")
    if not any(dest.iterdir()):
        return
    try:
        read_layout(dest)
    except PackageError as error:
        raise PackageError(
            f"{dest} exists and is not a bundle, so it is not replaced ({error}); choose another --output or "
            "remove it",
            kind="bundle_output",
        ) from error


def write_bundle(
    package: str | os.PathLike[str],
    op_libraries: Sequence[str | os.PathLike[str]],
    dest: str | os.PathLike[str],
    sign_key: str | os.PathLike[str] | None = None,
    verify_key: str | os.PathLike[str] | None = None,
) -> Path:
    """Write a deploy bundle: model.pt2 and exactly the op libraries its spec records
    (copied), signed into model.sig if ``sign_key`` is given. It is written into a
    sibling temporary folder, then put in place, so ``dest`` is never half-written; an
    existing bundle there (``package`` itself, to sign it in place) is replaced, and the
    replaced folder stays hidden beside it (``.NAME.*.tmp``) until a write at least
    ``STALE_STAGING_SECONDS`` later removes it.

    Args:
        package: a .pt2 package, or a bundle (its package and, unless given, its
            libraries are taken; its model.sig is not).
        op_libraries: library files, matched to the recorded ones by file name.
            Without one, the project's library comes from its default place (as
            run_inference finds it); any other must be given.
        dest: the bundle folder to write.
        sign_key: a PEM EC private key (P-256, P-384 or P-521).
        verify_key: a PEM public key: the staged bundle must be signed and verify
            with it (as a runner would verify it) before it is put in place.

    Returns:
        ``dest``.

    Raises:
        PackageError: the package cannot be read, a library is missing or not
            recorded, ``dest`` holds something other than a bundle, or signing failed.
        OpLibraryError: the project's library is needed and cannot be found.
        SigningUnavailableError: ``sign_key`` was given without the sign extra.
    """
    from .archive import read_package_spec

    source, dest = Path(package), Path(dest)
    if sign_key is not None:
        from .signing import check_private_key

        check_private_key(sign_key)  # before anything is copied
    bundled: dict[str, Path] = {}
    if is_bundle(source):
        layout = read_layout(source)
        package_file = layout.package
        bundled = {name: layout.dir / name for name in layout.libraries}
    else:
        package_file = source
    spec = read_package_spec(package_file)
    libraries = _choose_libraries(package_file, spec, [Path(p) for p in op_libraries], bundled)
    _check_destination(dest)

    # The staging folder has the bundle's own name (inside a private temporary
    # folder), as the signature records the folder's name as its subject.
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(dest)
        staging_root = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp"))
    except OSError as error:
        raise PackageError(
            f"could not write the bundle {dest}: {error.strerror or error} ({dest.parent}); pick a writable --output",
            kind="bundle_output",
        ) from error
    try:
        staged = staging_root / dest.name
        staged.mkdir()
        try:
            shutil.copyfile(package_file, staged / PACKAGE_NAME)
            for name, path in libraries:
                shutil.copyfile(path, staged / name)
        except OSError as error:
            raise PackageError(f"could not write the bundle {dest}: {error}", kind="bundle_output") from error
        if sign_key is not None:
            from .signing import sign_bundle

            sign_bundle(staged, sign_key)
        if verify_key is not None:
            from ..runtime.trust import TrustPolicy, open_model

            with open_model(staged, TrustPolicy(Path(verify_key), "--trusted-key", True)):
                pass  # verified, as the runners will verify it; the copy is removed
        replaced = _put_in_place(staged, dest, staging_root)
    except BaseException:
        shutil.rmtree(staging_root, ignore_errors=True)
        raise
    if not replaced:
        shutil.rmtree(staging_root, ignore_errors=True)
    # else the folder that was replaced stays (hidden) for a while: a reader that opened it
    # just before the swap finds it whole; a later write removes it.
    return dest


# How long a replaced bundle folder stays beside its successor before a later write to
# the same parent folder removes it (with any staging folder a killed writer left).
STALE_STAGING_SECONDS = 60.0


def _remove_stale_staging(dest: Path) -> None:
    """Remove the hidden staging folders of earlier writes of ``dest`` (a replaced
    bundle kept for readers, or what a killed writer left) older than
    ``STALE_STAGING_SECONDS``."""
    now = time.time()
    for old in dest.parent.glob(f".{glob.escape(dest.name)}.*.tmp"):
        try:
            if old.is_dir() and not old.is_symlink() and now - old.lstat().st_mtime > STALE_STAGING_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (renameat2 RENAME_EXCHANGE): a reader sees one or the
    other, never neither. False where the kernel, libc or file system lacks it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0


def _put_in_place(staged: Path, dest: Path, staging_root: Path) -> bool:
    """Rename ``staged`` to ``dest``. An existing ``dest`` is swapped with it in one step
    where the system can (so a polling server never sees the folder missing), else
    moved aside first and moved back if the rename fails; the old one ends in the
    staging folder. Returns whether an existing ``dest`` was replaced."""
    try:
        if dest.exists() and _exchange(staged, dest):
            os.utime(staging_root)  # its age counts from the swap
            return True
        if dest.exists():
            previous = staging_root / f"{dest.name}.previous"
            os.rename(dest, previous)
            try:
                os.rename(staged, dest)
            except OSError:
                os.rename(previous, dest)
                raise
            os.utime(staging_root)
            return True
        os.rename(staged, dest)
        return False
    except OSError as error:
        raise PackageError(f"could not put the bundle in place at {dest}: {error}", kind="bundle_output") from error
