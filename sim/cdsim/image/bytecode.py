"""Compiled bytecode, shipped: a read-only root cannot cache it, so every start would compile.

Measured on the amd64 image under runc: importing every component takes 0.7 s from sources
and 0.2 s from shipped bytecode, for about 16 MiB more to pull. The ``.pyc`` files are
reproducible: ``unchecked-hash`` headers (no source mtime), one compiling process with a
fixed hash seed (so ``frozenset`` constants and marshal's references come out the same),
and source paths as the image sees them (``/usr/…``, not the build folder).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from cdsim.image import errors

MAGIC_311 = (3495).to_bytes(2, "little") + b"\r\n"
"""The bytecode magic number of every CPython 3.11 (bookworm's python3.11 reads only this)."""
FOLDERS = ("usr/lib/python3.11", "usr/local/lib/python3.11/dist-packages")
"""The standard library and the installed wheels, relative to the root."""


class BytecodeError(errors.ImageError):
    """The bytecode could not be compiled for the image's interpreter."""


def compileall_argv(root: pathlib.Path, folders: Sequence[str] = FOLDERS) -> list[str]:
    """The compile command: one process, hashed headers, in-image source paths."""
    return [
        sys.executable, "-m", "compileall", "-q", "-j", "1",
        "--invalidation-mode", "unchecked-hash",
        "-s", str(root), "-p", "/",
        *(str(root / folder) for folder in folders),
    ]  # fmt: skip


def compile_tree(root: pathlib.Path) -> None:
    """Compile the image's Python sources under ``root`` with this (3.11) interpreter."""
    if importlib.util.MAGIC_NUMBER != MAGIC_311:
        raise BytecodeError(
            f"the image's python3.11 reads only CPython 3.11 bytecode; this build runs "
            f"{sys.version.split()[0]}: build with a Python 3.11 environment "
            "(`make venv PYTHON=python3.11`)"
        )
    done = subprocess.run(
        compileall_argv(root),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
        timeout=1200,
    )
    if done.returncode != 0:
        raise BytecodeError(f"compileall exited {done.returncode}:\n{done.stdout[-3000:]}")
