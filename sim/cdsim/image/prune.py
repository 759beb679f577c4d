"""What the image leaves out of its packages: documentation, package-manager state, caches.

:func:`keep` decides per path (pure); :func:`prune_tree` applies it to a finished tree, for
what pip installed. Nothing here removes a file that a shipped program opens at run time.
"""

from __future__ import annotations

import fnmatch
import pathlib
import shutil

LEFT_OUT = (
    # Documentation, manuals, translations, bug-report and lint metadata.
    "usr/share/doc",
    "usr/share/doc-base",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bug",
    # Package-manager state and caches: the image has no dpkg or apt; the recipe writes the
    # package record scanners read (var/lib/dpkg/status.d) itself.
    "var/lib/dpkg",
    "var/lib/apt",
    "var/cache",
    "var/log",
    "etc/apt",
    "etc/dpkg",
    "etc/cron.daily",
    "etc/logrotate.d",
    # glibc's iconv modules: Python has its own codecs, and nothing else here converts text.
    "usr/lib/*/gconv",
    # Registering Python as a binfmt interpreter, and Debian's byte-compiling helpers, which
    # run only from dpkg maintainer scripts.
    "usr/lib/binfmt.d",
    "usr/share/binfmts",
    "usr/share/python3",
    "usr/bin/py3clean",
    "usr/bin/py3compile",
    "usr/bin/py3versions",
    # Bytecode from elsewhere: the recipe compiles the image's own after pruning.
    "**/__pycache__",
)
"""Patterns of relative paths left out, with everything under them (``*`` is one name,
``**/`` any depth)."""

KEPT = (
    # Each package's copyright file: the licence terms its binaries ship under.
    "usr/share/doc/*/copyright",
    # The record of installed packages that image scanners read (one control file each).
    "var/lib/dpkg/status.d/*",
)
"""Patterns kept although a :data:`LEFT_OUT` pattern covers them (their folders too)."""


def _matches(path: pathlib.PurePosixPath, pattern: str) -> bool:
    if pattern.startswith("**/"):
        name = pattern.removeprefix("**/")
        return any(fnmatch.fnmatchcase(part, name) for part in path.parts)
    wanted = pattern.split("/")
    if len(path.parts) < len(wanted):
        return False
    return all(
        fnmatch.fnmatchcase(part, want) for part, want in zip(path.parts, wanted, strict=False)
    )


def _leads_to(path: pathlib.PurePosixPath, pattern: str) -> bool:
    """True when ``path`` is a folder on the way to what ``pattern`` names."""
    wanted = pattern.split("/")
    return len(path.parts) < len(wanted) and all(
        fnmatch.fnmatchcase(part, want) for part, want in zip(path.parts, wanted, strict=False)
    )


def keep(path: pathlib.PurePosixPath) -> bool:
    """False when ``path`` (relative to the root) or a folder above it is left out.

    :data:`KEPT` wins, and so do the folders that lead to a kept path.
    """
    if any(_matches(path, p) or _leads_to(path, p) for p in KEPT):
        return True
    return not any(_matches(path, pattern) for pattern in LEFT_OUT)


def prune_tree(root: pathlib.Path) -> list[pathlib.PurePosixPath]:
    """Remove every left-out path under ``root``; returns what was removed, sorted."""
    removed: list[pathlib.PurePosixPath] = []
    for path in sorted(root.rglob("*")):
        relative = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        if keep(relative) or not (path.is_symlink() or path.exists()):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(relative)
    return removed
