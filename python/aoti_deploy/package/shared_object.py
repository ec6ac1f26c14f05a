"""Shared objects from untrusted sources (a package's model library, an op
library), checked before they are loaded: the dynamic loader maps segments that a
truncated file does not have and dies with SIGBUS on first touch. The same rules and
words as cpp_runtime/core/shared_object.cpp."""

from __future__ import annotations

import platform
import struct
from pathlib import Path
from typing import Callable

from ..errors import PackageError

_MACHINES = {"x86_64": 62, "aarch64": 183}  # ELF e_machine
_ET_DYN = 3
_SHT_NOBITS = 8
_EHDR_SIZE, _PHDR_SIZE, _SHDR_SIZE = 64, 56, 64


def check_shared_object(size: int, read: Callable[[int, int], bytes], what: str, fix: str) -> None:
    """Raise PackageError (kind "damaged") unless ``read(offset, n)`` over ``size``
    bytes is a complete 64-bit little-endian ELF shared object for this machine: its
    program headers, every segment's bytes, and its section headers and sections
    inside the file. ``what`` names it in the message, and ``fix`` ends it."""

    def fail(why: str) -> PackageError:
        return PackageError(
            f"{what} is not a complete shared library for this machine: {why}. {fix}",
            kind="damaged",
        )

    machine = platform.machine()
    if size < _EHDR_SIZE:
        raise fail(f"it is {size} bytes long, shorter than an ELF header")
    header = read(0, _EHDR_SIZE)
    if header[:4] != b"\x7fELF":
        raise fail("it does not start with the ELF magic number")
    if header[4] != 2 or header[5] != 1:
        raise fail("it is not a 64-bit little-endian ELF file")
    e_type, e_machine = struct.unpack_from("<HH", header, 16)
    e_phoff, e_shoff = struct.unpack_from("<QQ", header, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", header, 54)
    if e_type != _ET_DYN:
        raise fail(f"it is an ELF file of type {e_type}, not a shared object")
    if e_machine != _MACHINES.get(machine):
        raise fail(f"it is built for ELF machine {e_machine}, not {machine}")
    if e_phnum == 0 or e_phentsize != _PHDR_SIZE or e_phoff + e_phnum * _PHDR_SIZE > size:
        raise fail(f"its program headers lie outside the file ({size} bytes)")
    segments = read(e_phoff, e_phnum * _PHDR_SIZE)
    for i in range(e_phnum):
        p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<QQQQ", segments, i * _PHDR_SIZE + 8)
        if p_offset + p_filesz > size:
            raise fail(
                f"segment {i} needs bytes {p_offset}+{p_filesz}, past the end of the file ({size} bytes; a "
                "truncated file?)"
            )
    if e_shnum == 0:
        return
    if e_shentsize != _SHDR_SIZE or e_shoff + e_shnum * _SHDR_SIZE > size:
        raise fail(f"its section headers lie outside the file ({size} bytes; a truncated file?)")
    sections = read(e_shoff, e_shnum * _SHDR_SIZE)
    for i in range(e_shnum):
        sh_type = struct.unpack_from("<I", sections, i * _SHDR_SIZE + 4)[0]
        sh_offset, sh_size = struct.unpack_from("<QQ", sections, i * _SHDR_SIZE + 24)
        if sh_type != _SHT_NOBITS and sh_offset + sh_size > size:
            raise fail(f"section {i} lies past the end of the file (a truncated file?)")


def check_shared_object_file(path: str | Path, what: str, fix: str) -> None:
    """check_shared_object on a file."""
    with open(path, "rb") as file:
        size = file.seek(0, 2)

        def read(offset: int, n: int) -> bytes:
            file.seek(offset)
            return file.read(n)

        check_shared_object(size, read, what, fix)
