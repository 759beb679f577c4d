"""Just enough of ELF to check a root filesystem built for a machine this host cannot run.

:func:`parse` reads the header (machine), the program interpreter, and the dynamic section's
``DT_NEEDED``/``DT_RPATH``/``DT_RUNPATH`` strings from a file's bytes; no I/O, no tools.
"""

from __future__ import annotations

import dataclasses
import struct

MAGIC = b"\x7fELF"
GO_BUILDINFO = b"\xff Go buildinf:"
"""The marker of a Go binary's build information (every Go toolchain since 1.13 writes it)."""

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29


class ElfError(ValueError):
    """The bytes start like ELF but do not parse as the loader would read them."""


@dataclasses.dataclass(frozen=True)
class Elf:
    """What the image checks need to know about one ELF file."""

    machine: int
    """``e_machine`` (62 x86-64, 183 AArch64)."""
    bits: int
    """32 or 64."""
    interpreter: str | None
    """The program interpreter (``PT_INTERP``) of a dynamically linked executable."""
    needed: tuple[str, ...]
    """Shared libraries the loader must find (``DT_NEEDED``), in order."""
    search: tuple[str, ...]
    """``DT_RPATH`` then ``DT_RUNPATH`` folders, ``$ORIGIN`` unexpanded."""
    go: bool
    """True when the file carries Go build information."""


def is_elf(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts with the ELF magic."""
    return head.startswith(MAGIC)


def parse(data: bytes) -> Elf:
    """Parse an ELF file's bytes (32-bit files: machine only; none ship in the image)."""
    if len(data) < 20 or not is_elf(data):
        raise ElfError("not an ELF file")
    bits = {1: 32, 2: 64}.get(data[4])
    endian = {1: "<", 2: ">"}.get(data[5])
    if bits is None or endian is None:
        raise ElfError(f"unknown ELF class {data[4]} or data encoding {data[5]}")
    (machine,) = struct.unpack_from(endian + "H", data, 18)
    go = GO_BUILDINFO in data
    if bits == 32:
        return Elf(machine=machine, bits=32, interpreter=None, needed=(), search=(), go=go)
    if len(data) < 64:
        raise ElfError("truncated ELF header")
    (phoff,) = struct.unpack_from(endian + "Q", data, 32)
    phentsize, phnum = struct.unpack_from(endian + "HH", data, 54)
    segments = [_segment(data, endian, phoff + i * phentsize) for i in range(phnum)]
    interpreter = next(
        (_cstring(data, off) for kind, off, _, _ in segments if kind == _PT_INTERP), None
    )
    needed, search = _dynamic(data, endian, segments)
    return Elf(
        machine=machine,
        bits=64,
        interpreter=interpreter,
        needed=needed,
        search=search,
        go=go,
    )


_Segment = tuple[int, int, int, int]
"""``(p_type, p_offset, p_vaddr, p_filesz)``."""


def _segment(data: bytes, endian: str, at: int) -> _Segment:
    if at + 56 > len(data):
        raise ElfError("program header past the end of the file")
    kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(endian + "IIQQQQ", data, at)
    return kind, offset, vaddr, filesz


def _dynamic(
    data: bytes, endian: str, segments: list[_Segment]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    dynamic = next((s for s in segments if s[0] == _PT_DYNAMIC), None)
    if dynamic is None:
        return (), ()
    _, offset, _, size = dynamic
    tags: list[tuple[int, int]] = []
    for at in range(offset, min(offset + size, len(data) - 15), 16):
        tag, value = struct.unpack_from(endian + "qQ", data, at)
        if tag == _DT_NULL:
            break
        tags.append((tag, value))
    strtab_vaddr = next((v for t, v in tags if t == _DT_STRTAB), None)
    if strtab_vaddr is None:
        raise ElfError("dynamic section without a string table")
    strtab = _file_offset(strtab_vaddr, segments)

    def strings(kind: int) -> list[str]:
        return [_cstring(data, strtab + v) for t, v in tags if t == kind]

    needed = tuple(strings(_DT_NEEDED))
    search = tuple(
        folder
        for entry in strings(_DT_RPATH) + strings(_DT_RUNPATH)
        for folder in entry.split(":")
        if folder
    )
    return needed, search


def _file_offset(vaddr: int, segments: list[_Segment]) -> int:
    for kind, offset, start, size in segments:
        if kind == _PT_LOAD and start <= vaddr < start + size:
            return vaddr - start + offset
    raise ElfError(f"address {vaddr:#x} is in no loaded segment")


def _cstring(data: bytes, at: int) -> str:
    end = data.find(b"\0", at)
    if at >= len(data) or end < 0:
        raise ElfError(f"string at {at:#x} runs past the end of the file")
    return data[at:end].decode("utf-8", "replace")
