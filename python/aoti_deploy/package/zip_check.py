"""Zip archives from untrusted files (tensor files, .pt2 packages), checked before
torch's zip reader sees them: that reader trusts declared sizes, offsets and entry
paths. The same rules and words as cpp_runtime/core/zip_archive.cpp; the entry-name
rule is pinned by tests/contract/archive_name_vectors.json."""

from __future__ import annotations

import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import PackageError

_LOCAL_HEADER = 0x04034B50
_CENTRAL_HEADER = 0x02014B50
_END_RECORD = 0x06054B50
_ZIP64_END_RECORD = 0x06064B50
_ZIP64_LOCATOR = 0x07064B50
_END_RECORD_SIZE = 22
_CENTRAL_HEADER_SIZE = 46
_LOCAL_HEADER_SIZE = 30
_ZIP64_END_RECORD_SIZE = 56
_ZIP64_LOCATOR_SIZE = 20
_UNIX_HOST = 3


@dataclass(frozen=True)
class ZipEntry:
    name: str
    header_offset: int
    data_offset: int
    size: int
    is_directory: bool


def entry_name_problem(name: str) -> str:
    """Why an entry name is refused, or "": empty, a control character, a backslash,
    an absolute path, or a "." or ".." component (a path that could leave the folder
    it is extracted into)."""
    if not name:
        return "has an empty name"
    for char in name:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            return "has a control character in its name"
        if char == "\\":
            return "has a backslash in its name"
    if name.startswith("/"):
        return "is an absolute path"
    for part in name.split("/"):
        if part == "..":
            return "has a '..' component (it would be extracted outside its folder)"
        if part == ".":
            return "has a '.' component"
    return ""


def _printable(name: str) -> str:
    shown = "".join("?" if ord(c) < 0x20 or ord(c) == 0x7F else c for c in name[:200])
    return shown + "..." if len(name) > 200 else shown


class _Checker:
    def __init__(self, file: BinaryIO, size: int, what: str) -> None:
        self.file, self.size, self.what = file, size, what

    def fail(self, why: str) -> PackageError:
        return PackageError(f"{self.what} is not a valid zip archive: {why}.", kind="damaged")

    def read(self, offset: int, n: int, part: str) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise self.fail(f"its {part} lies outside the file (the file is truncated or damaged)")
        self.file.seek(offset)
        data = self.file.read(n)
        if len(data) != n:
            raise PackageError(f"could not read {self.what} (it changed while being read?).", kind="damaged")
        return data

    def end_record(self) -> None:
        # The end record must be the file's last 22 bytes (no archive comment; torch
        # writes none). A comment would let two readers pick different end records:
        # miniz takes the last end-record signature with room after it, whatever its
        # comment length says, so a comment can hide a second archive.
        if self.size < _END_RECORD_SIZE:
            raise self.fail(f"it is {self.size} bytes long, shorter than a zip's end record")
        end = self.size - _END_RECORD_SIZE
        signature, disk, start_disk, on_disk, total, directory_size, directory_offset, comment = struct.unpack(
            "<IHHHHIIH", self.read(end, _END_RECORD_SIZE, "end record"))
        if signature != _END_RECORD:
            raise self.fail("it does not end with an end-of-central-directory record (a truncated file, a zip with a "
                            "comment, or not a zip archive)")
        if comment != 0:
            raise self.fail("its end record declares a comment, but it ends the file")
        if disk != 0 or start_disk != 0 or on_disk != total:
            raise self.fail("it spans several disks")
        self.count, self.directory_size, self.directory_offset = total, directory_size, directory_offset
        limit = end
        if total == 0xFFFF or directory_size == 0xFFFFFFFF or directory_offset == 0xFFFFFFFF:
            limit = self.zip64_end(end)
        if self.directory_offset + self.directory_size > limit:
            raise self.fail(
                f"its central directory ({self.directory_size} bytes at offset {self.directory_offset}) lies "
                "outside the file"
            )
        if self.count > self.directory_size // _CENTRAL_HEADER_SIZE:
            raise self.fail(f"it declares {self.count} entries in a central directory of {self.directory_size} bytes")

    def zip64_end(self, end: int) -> int:
        if end < _ZIP64_LOCATOR_SIZE:
            raise self.fail("its zip64 locator is missing")
        locator = self.read(end - _ZIP64_LOCATOR_SIZE, _ZIP64_LOCATOR_SIZE, "zip64 locator")
        if struct.unpack_from("<I", locator)[0] != _ZIP64_LOCATOR:
            raise self.fail("its zip64 locator is missing")
        record_offset = struct.unpack_from("<Q", locator, 8)[0]
        if record_offset + _ZIP64_END_RECORD_SIZE > end - _ZIP64_LOCATOR_SIZE:
            raise self.fail("its zip64 end record lies outside the file")
        record = self.read(record_offset, _ZIP64_END_RECORD_SIZE, "zip64 end record")
        if struct.unpack_from("<I", record)[0] != _ZIP64_END_RECORD:
            raise self.fail("its zip64 end record has no valid signature")
        on_disk, total, self.directory_size, self.directory_offset = struct.unpack_from("<QQQQ", record, 24)
        if on_disk != total:
            raise self.fail("it spans several disks")
        self.count = total
        return record_offset

    def zip64_extra(self, extra: bytes, values: list[int], shown: str) -> list[int]:
        at = 0
        while at + 4 <= len(extra):
            field_id, length = struct.unpack_from("<HH", extra, at)
            if at + 4 + length > len(extra):
                raise self.fail(f"{shown} has a damaged extra field")
            if field_id == 1:
                used = 0
                for i, value in enumerate(values):
                    if value != 0xFFFFFFFF:
                        continue
                    if used + 8 > length:
                        raise self.fail(f"{shown} has a short zip64 field")
                    values[i] = struct.unpack_from("<Q", extra, at + 4 + used)[0]
                    used += 8
            at += 4 + length
        return values

    def entries(self) -> list[ZipEntry]:
        self.end_record()
        entries: list[ZipEntry] = []
        names: set[str] = set()
        position = self.directory_offset
        directory_end = self.directory_offset + self.directory_size
        for i in range(self.count):
            if position + _CENTRAL_HEADER_SIZE > directory_end:
                raise self.fail(f"its central directory is shorter than the {self.count} entries it declares")
            header = self.read(position, _CENTRAL_HEADER_SIZE, "central directory")
            (signature, _made, host, _needed, flags, method, _time, _date, _crc, compressed, uncompressed,
             name_length, extra_length, comment_length, _disk, _internal, external, local) = struct.unpack(
                "<IBBHHHHHIIIHHHHHII", header)
            if signature != _CENTRAL_HEADER:
                raise self.fail(f"central directory entry {i} has no valid signature")
            variable = name_length + extra_length + comment_length
            if position + _CENTRAL_HEADER_SIZE + variable > directory_end:
                raise self.fail(f"central directory entry {i} runs past the directory")
            tail = self.read(position + _CENTRAL_HEADER_SIZE, variable, "central directory")
            name = tail[:name_length].decode("utf-8", errors="surrogateescape")
            shown = f"entry {i} ('{_printable(name)}')"
            problem = entry_name_problem(name)
            if problem:
                raise self.fail(f"{shown} {problem}")
            if name in names:
                raise self.fail(f"{shown} appears twice")
            names.add(name)
            uncompressed, compressed, local = self.zip64_extra(
                tail[name_length:name_length + extra_length], [uncompressed, compressed, local], shown)
            if flags & 0x1:
                raise self.fail(f"{shown} is encrypted")
            if method != 0:
                raise self.fail(f"{shown} is compressed (method {method}); torch writes every entry stored (method 0)")
            if compressed != uncompressed:
                raise self.fail(
                    f"{shown} is stored but declares {compressed} stored and {uncompressed} unpacked bytes")
            mode = external >> 16
            is_directory = name.endswith("/")
            # torch writes permission bits only (0600, no file type): a type, when given, must fit.
            if host == _UNIX_HOST and stat.S_IFMT(mode) != 0:
                if stat.S_ISLNK(mode):
                    raise self.fail(f"{shown} is a symbolic link")
                if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                    raise self.fail(f"{shown} is neither a regular file nor a folder (mode {mode})")
                if stat.S_ISDIR(mode) != is_directory:
                    raise self.fail(f"{shown}'s type does not match its name")
            entries.append(ZipEntry(name, local, self.local_header(name, local, compressed, shown), compressed,
                                    is_directory))
            position += _CENTRAL_HEADER_SIZE + variable
        ordered = sorted(entries, key=lambda entry: entry.header_offset)
        for before, after in zip(ordered, ordered[1:]):
            if before.data_offset + before.size > after.header_offset:
                raise self.fail(f"entries '{_printable(before.name)}' and '{_printable(after.name)}' overlap")
        return entries

    def local_header(self, name: str, offset: int, size: int, shown: str) -> int:
        if offset + _LOCAL_HEADER_SIZE > self.directory_offset:
            raise self.fail(f"{shown}'s local header lies outside the file's entries")
        header = self.read(offset, _LOCAL_HEADER_SIZE, "local header")
        signature = struct.unpack_from("<I", header)[0]
        name_length, extra_length = struct.unpack_from("<HH", header, 26)
        if signature != _LOCAL_HEADER:
            raise self.fail(f"{shown}'s local header has no valid signature")
        if offset + _LOCAL_HEADER_SIZE + name_length + extra_length > self.directory_offset:
            raise self.fail(f"{shown}'s local header runs past the file's entries")
        local_name = self.read(offset + _LOCAL_HEADER_SIZE, name_length, "local header")
        if local_name.decode("utf-8", errors="surrogateescape") != name:
            raise self.fail(f"{shown}'s local header names another file")
        data = offset + _LOCAL_HEADER_SIZE + name_length + extra_length
        if data + size > self.directory_offset:
            raise self.fail(f"{shown} declares {size} bytes, more than the file holds")
        return data


def index_zip(path: str | Path, what: str) -> list[ZipEntry]:
    """Every entry of the zip archive at ``path``, once its structure, entry names
    and ranges pass the checks (see zip_archive.h). Raises PackageError (kind
    "damaged"): "<what> is not a valid zip archive: <why>."."""
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        return _Checker(file, size, what).entries()


def read_entry(path: str | Path, entry: ZipEntry, offset: int = 0, size: int | None = None) -> bytes:
    """``size`` bytes (default: all) of an indexed entry, from ``offset`` within it."""
    size = entry.size - offset if size is None else size
    with open(path, "rb") as file:
        file.seek(entry.data_offset + offset)
        data = file.read(size)
    if len(data) != size:
        raise PackageError(f"could not read {entry.name} from {path} (it changed while being read?).", kind="damaged")
    return data
