"""What a root filesystem must be to ship: built for its machine, complete, the product alone.

Each check returns the problems it found (empty: passed), so the build can refuse with all of
them at once and a test can assert each on its own. The arm64 tree cannot be run here; these
checks are how the build knows it is whole: every ELF file is AArch64, every library a binary
needs is in the tree, every wheel is tagged for aarch64.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import stat
from collections.abc import Collection, Iterator, Sequence

from cdsim.image import arch as arch_
from cdsim.image import elf, errors, spec, wheels

FORBIDDEN = (
    # The simulator and its fakes: test-only, never in the product's image.
    ("cdsim", f"{spec.SITE_PACKAGES}/cdsim"),
    ("the simulator package", f"{spec.SITE_PACKAGES}/computedomains/sim"),
    ("the simulator distribution", f"{spec.SITE_PACKAGES}/compute_domains_sim-*"),
    ("fake IMEX", "**/nvidia-imex*"),
    ("fake NVML", "**/libnvidia-ml.so*"),
    # Build tools: nothing is compiled or installed at run time.
    ("a compiler", "usr/bin/*gcc*"),
    ("a compiler", "usr/lib/gcc"),
    ("a compiler", "usr/libexec/gcc"),
    ("pip", f"{spec.SITE_PACKAGES}/pip"),
    ("setuptools", f"{spec.SITE_PACKAGES}/setuptools"),
    ("setuptools", f"{spec.SITE_PACKAGES}/pkg_resources"),
    ("Debian's pip", "usr/lib/python3/dist-packages/pip"),
    ("a package manager", "usr/bin/dpkg"),
    ("a package manager", "usr/bin/apt*"),
    ("a shell", "usr/bin/*sh"),
)
"""``(what, pattern)`` of paths that must not exist (patterns as :func:`pathlib.Path.glob`)."""


class CheckError(errors.ImageError):
    """A root filesystem failed its checks; the message lists every problem."""


@dataclasses.dataclass(frozen=True)
class ElfFile:
    """An ELF file of the tree and what it says."""

    path: pathlib.PurePosixPath
    """Relative to the root."""
    info: elf.Elf


def elf_files(root: pathlib.Path) -> Iterator[ElfFile]:
    """Every regular ELF file under ``root`` (links not followed), in path order."""
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as handle:
            if not elf.is_elf(handle.read(4)):
                continue
        relative = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        try:
            yield ElfFile(relative, elf.parse(path.read_bytes()))
        except elf.ElfError:  # machine_problems reports it: machine -1 fits no architecture
            yield ElfFile(relative, elf.Elf(-1, 0, None, (), (), go=False))


def machine_problems(files: Sequence[ElfFile], arch: arch_.Arch) -> list[str]:
    """ELF files that are not 64-bit binaries for ``arch``'s machine."""
    return [
        f"{f.path}: ELF machine {f.info.machine} ({f.info.bits}-bit), not {arch.elf_machine} "
        f"({arch.name})"
        for f in files
        if f.info.machine != arch.elf_machine or f.info.bits != 64
    ]


def go_problems(files: Sequence[ElfFile]) -> list[str]:
    """ELF files built by Go (the simulator's tools are; nothing in the product is)."""
    return [f"{f.path}: a Go binary" for f in files if f.info.go]


def resolve(root: pathlib.Path, path: str, *, limit: int = 40) -> pathlib.Path | None:
    """Where ``path`` (absolute inside the image) leads, following links inside ``root``.

    Absolute link targets are taken relative to ``root``, as the container sees them, never
    the host's files. None when nothing is there.
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current = root
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            if hops > limit:
                return None
            target = str(candidate.readlink())
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            current = root if target.startswith("/") else current
            continue
        if not candidate.exists():
            return None
        current = candidate
    return current


def library_problems(
    root: pathlib.Path, files: Sequence[ElfFile], *, arch: arch_.Arch
) -> list[str]:
    """Interpreters and ``DT_NEEDED`` libraries that the loader would not find in the tree."""
    defaults = (f"/lib/{arch.triplet}", f"/usr/lib/{arch.triplet}", "/lib", "/usr/lib")
    problems: list[str] = []
    for f in files:
        if f.info.interpreter and resolve(root, f.info.interpreter) is None:
            problems.append(f"{f.path}: interpreter {f.info.interpreter} is missing")
        origin = "/" + str(f.path.parent)
        search = [s.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for s in f.info.search]
        for library in f.info.needed:
            if not any(resolve(root, f"{folder}/{library}") for folder in (*search, *defaults)):
                problems.append(f"{f.path}: needs {library}, which is not in the image")
    return problems


def wheel_problems(root: pathlib.Path, arch: arch_.Arch) -> list[str]:
    """Installed wheels not tagged for CPython 3.11 on ``arch`` (see :mod:`wheels`)."""
    tags = wheels.installed_tags(root / spec.SITE_PACKAGES)
    if not tags:
        return [f"no wheel is installed in {spec.SITE_PACKAGES}"]
    return wheels.tag_problems(tags, arch)


def product_problems(root: pathlib.Path, *, waived: Collection[str] = ()) -> list[str]:
    """What the image must not carry, and set-id files.

    :data:`FORBIDDEN` but for the ``what`` named in ``waived``.
    """
    problems = [
        f"{match.relative_to(root)}: {what} does not belong in the image"
        for what, pattern in FORBIDDEN
        if what not in waived
        for match in sorted(root.glob(pattern))
    ]
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            problems.append(f"{path.relative_to(root)}: set-user or set-group ID")
    script = root / spec.SCRIPTS / "computedomains"
    if not script.is_file() or not os.access(script, os.X_OK):
        problems.append(f"{spec.SCRIPTS}/computedomains is missing or not executable")
    return problems


def problems(root: pathlib.Path, arch: arch_.Arch, *, waived: Collection[str] = ()) -> list[str]:
    """Every problem the checks find in the root filesystem of ``arch`` at ``root``.

    ``waived``: see :func:`product_problems`.
    """
    files = list(elf_files(root))
    if not files:
        return [f"no ELF file under {root}"]
    return [
        *machine_problems(files, arch),
        *go_problems(files),
        *library_problems(root, files, arch=arch),
        *wheel_problems(root, arch),
        *product_problems(root, waived=waived),
    ]


def verify(root: pathlib.Path, arch: arch_.Arch, *, waived: Collection[str] = ()) -> None:
    """Raise :class:`CheckError` listing every problem, if there is any."""
    found = problems(root, arch, waived=waived)
    if found:
        shown = "\n  ".join(found[:50])
        more = f"\n  ... and {len(found) - 50} more" if len(found) > 50 else ""
        raise CheckError(f"the {arch.name} root filesystem fails its checks:\n  {shown}{more}")
