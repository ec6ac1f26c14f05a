"""Writing deploy bundles: model.pt2 and exactly the op libraries its spec records,
signed if a key is given, staged beside the destination and put in place in one
step, so a reader never sees a half-written bundle."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import PackageError
from ..locate import LIBRARY_NAME, op_library_path
from .archive import read_package_spec
from .bundle import PACKAGE_NAME, is_bundle, read_layout, recorded_libraries
from .signing import check_private_key, sign_bundle
from .spec import PackageSpec


def _choose_libraries(
    package: Path, spec: PackageSpec, given: Sequence[Path], bundled: dict[str, Path]
) -> list[tuple[str, Path]]:
    """(file name, source) of each library the spec records, in its order: a given
    one of that file name, else the source bundle's, else, for the project's own
    library, the default one (as run_inference finds it)."""
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
    check_staged: Callable[[Path], None] | None = None,
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
        check_staged: called with the staged bundle before it is put in place (e.g.
            to verify its signature as a runner would); what it raises stops the
            write, and ``dest`` is left as it was.

    Returns:
        ``dest``.

    Raises:
        PackageError: the package cannot be read, a library is missing or not
            recorded, ``dest`` holds something other than a bundle, or signing failed.
        OpLibraryError: the project's library is needed and cannot be found.
        SigningUnavailableError: ``sign_key`` was given without the sign extra.
    """
    source, dest = Path(package), Path(dest)
    if sign_key is not None:
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
            sign_bundle(staged, sign_key)
        if check_staged is not None:
            check_staged(staged)
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
