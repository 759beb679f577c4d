"""The image's platforms: one per architecture, with every name each tool uses for it."""

from __future__ import annotations

import dataclasses

GLIBC = (2, 36)
"""glibc of Debian bookworm: the newest ``manylinux_2_*`` tag a wheel may carry."""

OLDEST_MANYLINUX = 17
"""``manylinux_2_17`` (manylinux2014): the oldest PEP 600 tag pip is offered."""


@dataclasses.dataclass(frozen=True)
class Arch:
    """One target architecture of the image."""

    name: str
    """Debian's and OCI's name (``amd64``, ``arm64``)."""
    machine: str
    """The kernel's and the wheel tags' name (``x86_64``, ``aarch64``)."""
    elf_machine: int
    """ELF ``e_machine`` of every binary built for it (62 x86-64, 183 AArch64)."""
    triplet: str
    """Debian's multiarch library folder name (``x86_64-linux-gnu``)."""
    variant: str | None = None
    """OCI platform variant (``v8`` for arm64), None where the spec sets none."""

    def pip_platforms(self) -> tuple[str, ...]:
        """Every ``--platform`` pip must be given to accept a wheel that runs on bookworm.

        pip expands only the legacy ``manylinux2014``/``2010`` aliases, so the PEP 600 tags
        from bookworm's glibc down to 2.17 are listed one by one, newest first.
        """
        major, newest = GLIBC
        tags = [f"manylinux_{major}_{minor}_{self.machine}" for minor in range(newest, 16, -1)]
        return (*tags, f"manylinux2014_{self.machine}")

    def accepts_platform_tag(self, tag: str) -> bool:
        """True when a wheel's platform tag (``manylinux_2_17_x86_64``, ``any``) runs here."""
        if tag == "any":
            return True
        if tag.startswith("manylinux_"):
            parts = tag.removeprefix("manylinux_").split("_", 2)
            if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
                return False
            major, minor, machine = int(parts[0]), int(parts[1]), parts[2]
            return machine == self.machine and (major, minor) <= GLIBC
        legacy = ("manylinux1_", "manylinux2010_", "manylinux2014_")
        return tag.startswith(legacy) and tag.split("_", 1)[1] == self.machine


AMD64 = Arch(name="amd64", machine="x86_64", elf_machine=62, triplet="x86_64-linux-gnu")
ARM64 = Arch(
    name="arm64", machine="aarch64", elf_machine=183, triplet="aarch64-linux-gnu", variant="v8"
)
ARCHES: tuple[Arch, ...] = (AMD64, ARM64)
"""The architectures of the index, in the order its manifests list them."""


def by_name(name: str) -> Arch:
    """The architecture called ``name`` (``amd64``, ``arm64``)."""
    for arch in ARCHES:
        if arch.name == name:
            return arch
    raise ValueError(f"unknown architecture {name!r}; choose {', '.join(a.name for a in ARCHES)}")
