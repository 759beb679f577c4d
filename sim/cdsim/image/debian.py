"""The Debian part of the root filesystem: which packages, fetched how, unpacked how.

``mmdebstrap --variant=extract`` resolves the package set against the mirror for the target
architecture and downloads it (no maintainer script runs, so arm64 builds on an amd64 host);
:func:`assemble` then unpacks the packages the image keeps with :mod:`cdsim.image.deb` and
does the little their maintainer scripts would have done that matters here (the merged-
``/usr`` links). The versions installed are recorded in ``var/lib/dpkg/status.d/``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
from collections.abc import Mapping, Sequence

from cdsim.image import arch as arch_
from cdsim.image import deb, errors, prune

SUITE = "bookworm"
INCLUDE = (
    "base-files",
    "python3.11-minimal",
    "libpython3.11-stdlib",
    "python3-minimal",
    "libstdc++6",
)
"""What the image asks for: the OS identity (``/etc/os-release``, which scanners read), the
interpreter, its standard library, ``/usr/bin/python3``, and the C++ runtime that manylinux
wheels may link to (grpcio, protobuf, frozenlist do). apt adds their dependencies."""

DROPPED = {
    "dpkg": "package manager: the image has none; apt pulls it in for readline-common",
    "tar": "needed by dpkg only",
    "mawk": "base-files' pre-dependency, for its maintainer script",
    "libacl1": "tar's library",
    "libmd0": "dpkg's library",
    "libselinux1": "dpkg's and tar's library",
    "libpcre2-8-0": "libselinux1's library",
    "libzstd1": "dpkg's library",
}
"""Packages apt's resolution adds that nothing in the image runs: downloaded, not unpacked.
The build's shared-library check proves no shipped binary needs them."""

SNAPSHOT_ENV = "COMPUTE_DOMAINS_DEBIAN_SNAPSHOT"
"""A snapshot.debian.org timestamp (``20250520T000000Z``) to build from instead of the live
mirror: the same timestamp gives the same packages on any day."""
MIRROR_ENV = "COMPUTE_DOMAINS_DEBIAN_MIRROR"
"""A Debian mirror base URL (its ``debian`` and ``debian-security`` archives beside each other)."""
DEFAULT_MIRROR = "http://deb.debian.org"


class DebianError(errors.ImageError):
    """Fetching or unpacking the Debian packages failed; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Mirror:
    """Where the packages come from."""

    archive: str
    """The main archive (``…/debian``): the suite and its ``-updates``."""
    security: str
    """The security archive (``…/debian-security``)."""
    snapshot: bool = False
    """True for snapshot.debian.org, whose Release files are past their Valid-Until."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Mirror:
        """The live mirror, or the snapshot or mirror the environment names."""
        stamp = env.get(SNAPSHOT_ENV, "")
        if stamp:
            base = "http://snapshot.debian.org/archive"
            return cls(f"{base}/debian/{stamp}", f"{base}/debian-security/{stamp}", True)
        base = env.get(MIRROR_ENV, "").rstrip("/") or DEFAULT_MIRROR
        return cls(f"{base}/debian", f"{base}/debian-security")

    def sources(self) -> tuple[str, ...]:
        """One-line apt sources for the suite, its updates and its security updates."""
        return (
            f"deb {self.archive} {SUITE} main",
            f"deb {self.archive} {SUITE}-updates main",
            f"deb {self.security} {SUITE}-security main",
        )


CLEANUP_ATTEMPTS = 3
CLEANUP_RACE = "target is busy"
"""What mmdebstrap says when its chroot's /proc cannot be unmounted yet."""


def mmdebstrap_argv(
    arch: arch_.Arch, mirror: Mirror, *, debs: pathlib.Path, include: Sequence[str] = INCLUDE
) -> list[str]:
    """The command that downloads ``include`` of ``arch`` into ``debs``.

    apt resolves what the packages depend on; those come too.
    """
    if any(c.isspace() for c in str(debs)):
        raise DebianError(f"mmdebstrap's sync-out hook cannot take a path with spaces: {debs}")
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=extract",
        f"--architectures={arch.name}",
        "--include=" + ",".join(include),
        "--format=null",
        # Extract hooks run before the apt cache is emptied: copy the downloads out.
        f"--extract-hook=sync-out /var/cache/apt/archives {debs}",
    ]
    if mirror.snapshot:
        argv.append('--aptopt=Acquire::Check-Valid-Until "false"')
    return [*argv, SUITE, "/dev/null", *mirror.sources()]


def download(
    arch: arch_.Arch,
    mirror: Mirror,
    *,
    debs: pathlib.Path,
    epoch: int,
    include: Sequence[str] = INCLUDE,
) -> list[deb.Package]:
    """Fetch the package set of ``arch`` into ``debs``; returns the packages, by name."""
    debs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    for attempt in range(CLEANUP_ATTEMPTS):
        done = subprocess.run(
            mmdebstrap_argv(arch, mirror, debs=debs, include=include),
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=900,
        )
        # A process of the foreign architecture's emulation may still hold the chroot's /proc
        # when mmdebstrap tears it down; that failure says nothing of the packages: run again.
        if done.returncode == 0 or CLEANUP_RACE not in done.stderr:
            break
        print(f"[image] {arch.name}: mmdebstrap's cleanup raced a process in its chroot "
              f"(attempt {attempt + 1}); running it again", flush=True)  # fmt: skip
    if done.returncode != 0:
        raise DebianError(
            f"mmdebstrap ({arch.name}) exited {done.returncode}:\n{done.stderr.strip()[-3000:]}"
        )
    packages = sorted((deb.read(p) for p in debs.glob("*.deb")), key=lambda p: p.name)
    wrong = [p.path.name for p in packages if p.architecture not in (arch.name, "all")]
    if wrong or not packages:
        raise DebianError(f"mmdebstrap ({arch.name}) left {wrong or 'no packages'} in {debs}")
    return packages


def kept(packages: Sequence[deb.Package]) -> list[deb.Package]:
    """The packages the image unpacks: all that apt resolved, less :data:`DROPPED`."""
    return [p for p in packages if p.name not in DROPPED]


def assemble(packages: Sequence[deb.Package], root: pathlib.Path) -> None:
    """Unpack ``packages`` into ``root`` as a merged-``/usr`` Debian system and record them."""
    for package in packages:
        deb.unpack(package, root, keep=prune.keep)
    # usrmerge's work: /bin, /sbin, /lib (and /lib64 where the loader lives there) are links.
    for name in deb.MERGED_USR:
        if (root / "usr" / name).is_dir() and not (root / name).is_symlink():
            (root / name).symlink_to(f"usr/{name}")
    record = root / "var/lib/dpkg/status.d"
    record.mkdir(parents=True, exist_ok=True)
    for package in packages:
        (record / package.name).write_text(deb.render_control(package.control))


def versions(packages: Sequence[deb.Package]) -> dict[str, str]:
    """``name → version`` of ``packages`` (the build records both the kept and the dropped)."""
    return {p.name: p.version for p in packages}
