"""Private folders in $TMPDIR named by their owner (pid and start time), so that a later
runner can remove the folder a killed one left behind, and never a live one's. The name
format and the "is the owner gone" rule; cpp_runtime/core/private_folder.cpp has the
same, pinned by tests/contract/private_folder_vectors.json."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple

# The C++ runtimes' unpacked package, and the Python runtime's private copy of a bundle.
UNPACKED_PREFIX = "aoti_deploy_unpacked_"
BUNDLE_COPY_PREFIX = "aoti_deploy_bundle_"
PREFIXES = (UNPACKED_PREFIX, BUNDLE_COPY_PREFIX)

_RANDOM_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_MIN_RANDOM = 6  # mkdtemp's XXXXXX in C++
_MAX_RANDOM = 16  # tempfile's names have 8
_MAX_NUMBER = (1 << 64) - 1


class FolderOwner(NamedTuple):
    pid: int
    start_time: int  # /proc/<pid>/stat field 22: clock ticks after boot


def _decimal(text: str) -> int | None:
    """A decimal number without sign or leading zero, that fits in 64 bits."""
    if not text or len(text) > 20 or (len(text) > 1 and text[0] == "0"):
        return None
    if not all("0" <= c <= "9" for c in text):
        return None
    value = int(text)
    return value if value <= _MAX_NUMBER else None


def folder_owner(name: str) -> FolderOwner | None:
    """The owner a folder's name (<prefix><pid>_<start>_<random>) records, or None when
    the name is not one of ours (another prefix, the unowned names of earlier versions,
    a malformed number): such a folder is never removed."""
    prefix = next((p for p in PREFIXES if name.startswith(p)), None)
    if prefix is None:
        return None
    parts = name[len(prefix):].split("_", 2)
    if len(parts) != 3:
        return None
    pid, start, random = _decimal(parts[0]), _decimal(parts[1]), parts[2]
    if not pid or start is None or not _MIN_RANDOM <= len(random) <= _MAX_RANDOM:
        return None
    if not all(c in _RANDOM_CHARS for c in random):
        return None
    return FolderOwner(pid, start)


def start_time_from_stat(text: str) -> int | None:
    """Field 22 (starttime) of a /proc/<pid>/stat text, or None when it cannot be read
    (the command name, field 2, may hold spaces and parentheses: fields count from the
    last ')')."""
    close = text.rfind(")")
    if close < 0:
        return None
    at = close + 1
    for field in range(3, 23):
        if at >= len(text) or text[at] != " ":
            return None
        ends = [i for i in (text.find(" ", at + 1), text.find("\n", at + 1)) if i >= 0]
        end = min(ends) if ends else len(text)
        if field == 22:
            return _decimal(text[at + 1:end])
        at = end
    return None


def owner_is_gone(owner: FolderOwner, stat_text: str | None) -> bool:
    """The rule: the owner is gone when no process has its pid (``stat_text`` None), or
    the process that has it started at another time (the pid was reused). A process
    whose start time cannot be read is taken to be the owner."""
    if stat_text is None:
        return True
    start = start_time_from_stat(stat_text)
    return start is not None and start != owner.start_time


def _read_stat(pid: int) -> str | None:
    """/proc/<pid>/stat: None when no process has that pid; "" when it could not be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as file:
            return file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return ""


def _own_start_time() -> int | None:
    text = _read_stat(os.getpid())
    return None if text is None else start_time_from_stat(text)


class PrivateFolder:
    """A new private folder (mkdtemp: mode 0700) in $TMPDIR, named by this process and
    locked (flock) by a descriptor held until ``remove``, so that even a sweeper in
    another pid namespace leaves it alone. Without a readable /proc it gets the unowned
    name of earlier versions."""

    def __init__(self, prefix: str) -> None:
        start = _own_start_time()
        owned = prefix if start is None else f"{prefix}{os.getpid()}_{start}_"
        self.path = Path(tempfile.mkdtemp(prefix=owned))
        self._lock_fd: int | None = None
        try:
            self._lock_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else holds it
        except OSError:
            pass

    def remove(self) -> None:
        """Remove the folder and its files (without following links); errors are ignored."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _remove_if_orphaned(parent_fd: int, name: str) -> bool:
    owner = folder_owner(name)
    if owner is None or not owner_is_gone(owner, _read_stat(owner.pid)):
        return False
    before = os.lstat(name, dir_fd=parent_fd)
    if not stat.S_ISDIR(before.st_mode) or before.st_uid != os.geteuid() or stat.S_IMODE(before.st_mode) != 0o700:
        return False
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        if not os.path.samestat(before, os.fstat(fd)):
            return False
        try:
            # The lock: a live owner (whatever its pid namespace) holds it; so does another sweeper.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        shutil.rmtree(name, dir_fd=parent_fd)  # never follows links
        return True
    finally:
        os.close(fd)


def remove_orphaned_folders() -> int:
    """Remove the folders of both prefixes in $TMPDIR whose owner is gone: only real
    folders (not links) of this user with mode 0700, as they are made, and only when no
    process holds their lock. Best effort: errors are ignored.

    Returns:
        How many folders were removed.
    """
    if _own_start_time() is None:
        return 0  # no /proc to tell a live owner from a gone one
    removed = 0
    try:
        parent_fd = os.open(tempfile.gettempdir(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        for name in os.listdir(parent_fd):
            try:
                removed += _remove_if_orphaned(parent_fd, name)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(parent_fd)
    return removed
