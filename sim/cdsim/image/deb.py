"""Reading Debian packages without dpkg: the ``ar`` container, the control paragraph, the data.

A foreign architecture's maintainer scripts cannot run on this host, and the image needs
none of them: :func:`unpack` writes a package's files into a root filesystem the way
``dpkg --unpack`` would on a merged-``/usr`` system, skipping what :mod:`cdsim.image.prune`
leaves out.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pathlib
import tarfile
from collections.abc import Callable

from cdsim.image import errors

_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60
MERGED_USR = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level folders that are symbolic links into ``/usr`` on Debian since bookworm."""


class DebError(errors.ImageError):
    """A ``.deb`` file is malformed or holds something the unpacker does not handle."""


@dataclasses.dataclass(frozen=True)
class Package:
    """One downloaded package: its control paragraph and where the file is."""

    path: pathlib.Path
    control: dict[str, str]

    @property
    def name(self) -> str:
        """The package name."""
        return self.control["Package"]

    @property
    def version(self) -> str:
        """The package version, epoch included."""
        return self.control["Version"]

    @property
    def architecture(self) -> str:
        """``amd64``, ``arm64`` or ``all``."""
        return self.control["Architecture"]


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an ``ar`` archive (a ``.deb``), by name."""
    if not data.startswith(_AR_MAGIC):
        raise DebError("not an ar archive")
    members: dict[str, bytes] = {}
    at = len(_AR_MAGIC)
    while at + _AR_HEADER <= len(data):
        header = data[at : at + _AR_HEADER]
        if header[58:60] != b"`\n":
            raise DebError(f"bad ar member header at byte {at}")
        name = header[0:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        start = at + _AR_HEADER
        members[name] = data[start : start + size]
        at = start + size + (size % 2)
    return members


def parse_control(text: str) -> dict[str, str]:
    """A deb822 paragraph as a dict; continuation lines keep their newline."""
    fields: dict[str, str] = {}
    key: str | None = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key is not None:
            fields[key] += "\n" + line
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def render_control(fields: dict[str, str]) -> str:
    """The inverse of :func:`parse_control` (field order kept)."""
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def _tar_member(members: dict[str, bytes], stem: str) -> tarfile.TarFile:
    for name, payload in members.items():
        if name == stem or name.startswith(stem + "."):
            return _open_tar(name, io.BytesIO(payload))
    raise DebError(f"no {stem}.tar.* member")


def _open_tar(name: str, payload: io.BytesIO) -> tarfile.TarFile:
    if name.endswith(".tar.xz"):
        return tarfile.open(fileobj=payload, mode="r:xz")
    if name.endswith(".tar.gz"):
        return tarfile.open(fileobj=payload, mode="r:gz")
    if name.endswith(".tar"):
        return tarfile.open(fileobj=payload, mode="r:")
    raise DebError(f"{name}: unsupported compression (xz and gz are handled)")


def read(path: pathlib.Path) -> Package:
    """The control paragraph of the package at ``path``."""
    members = ar_members(path.read_bytes())
    with _tar_member(members, "control.tar") as control:
        for info in control.getmembers():
            if info.name.lstrip("./") == "control":
                handle = control.extractfile(info)
                assert handle is not None
                return Package(path=path, control=parse_control(handle.read().decode()))
    raise DebError(f"{path.name}: no control file")


def merged_usr(path: pathlib.PurePosixPath) -> pathlib.PurePosixPath:
    """Where a packaged path lands on a merged-``/usr`` system (``lib/x`` → ``usr/lib/x``)."""
    if path.parts and path.parts[0] in MERGED_USR:
        return pathlib.PurePosixPath("usr", *path.parts)
    return path


def member_path(name: str) -> pathlib.PurePosixPath:
    """A tar member name (``./usr/bin/x``) as a relative path, merged-``/usr`` applied."""
    return merged_usr(pathlib.PurePosixPath(name.removeprefix("./").lstrip("/")))


def unpack(
    package: Package, root: pathlib.Path, *, keep: Callable[[pathlib.PurePosixPath], bool]
) -> list[pathlib.PurePosixPath]:
    """Write the package's files under ``root``; returns the paths written (``keep``-ed ones).

    Ownership is not applied (the layer writer records root for every file); modes are.
    """
    written: list[pathlib.PurePosixPath] = []
    with _tar_member(ar_members(package.path.read_bytes()), "data.tar") as data:
        for info in data:
            relative = member_path(info.name)
            if not relative.parts or not keep(relative):
                continue
            if ".." in relative.parts:
                raise DebError(f"{package.name}: member {info.name!r} leaves the root")
            _write(data, info, root, relative)
            written.append(relative)
    return written


def _write(
    data: tarfile.TarFile,
    info: tarfile.TarInfo,
    root: pathlib.Path,
    relative: pathlib.PurePosixPath,
) -> None:
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    if info.isdir():
        target.mkdir(exist_ok=True)
        target.chmod(info.mode & 0o7777)
        return
    if target.is_symlink() or target.exists():
        target.unlink()
    if info.issym():
        target.symlink_to(info.linkname)
    elif info.islnk():
        source = root / member_path(info.linkname)
        if not source.exists():
            raise DebError(f"hard link {info.name} to {info.linkname}, which is not unpacked")
        os.link(source, target)
    elif info.isfile():
        handle = data.extractfile(info)
        assert handle is not None
        target.write_bytes(handle.read())
        target.chmod(info.mode & 0o7777)
    else:
        raise DebError(f"{info.name}: device, fifo or other special file (type {info.type!r})")
