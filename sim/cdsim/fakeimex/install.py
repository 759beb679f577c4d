"""Install ``nvidia-imex`` and ``nvidia-imex-ctl`` into a simulated node's host tree.

The driver installs the real programs under its root, and the IMEX agent runs them from
there by path, inside its container. The fakes sit in the same place and bring what they
need: each program is a Python script (``#!<python> -S``: the image has no shell, and a
Python without ``site`` starts fast; the agent starts ``nvidia-imex-ctl`` for every IMEX
check) that finds its own copy of :mod:`cdsim.fakeimex`, standard library only, in
``usr/lib/compute-domains-sim`` beside it in the same tree. The interpreter is the image's
(:data:`IMAGE_PYTHON`) where agents run in containers, this Python where they run as
processes of the checkout.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
from collections.abc import Sequence

import cdsim

PROGRAMS = (("nvidia-imex", "daemon"), ("nvidia-imex-ctl", "ctl"))
"""(program name, module of :mod:`cdsim.fakeimex` whose ``main`` it runs)."""
IMAGE_PYTHON = "/usr/bin/python3"
"""Debian's Python in the product image."""
LIBRARY = "lib/compute-domains-sim"
"""Where the package copy goes, relative to the programs' ``bin`` folder's parent."""

PACKAGE_ROOT = pathlib.Path(cdsim.__file__).resolve().parent
"""The ``cdsim`` package folder (in the ``sim/`` tree or site-packages)."""


def script(role: str, python: str) -> str:
    """The program text for ``role``, run by ``python``."""
    return (
        f"#!{python} -S\n"
        "# Simulated cluster: the fake IMEX of compute-domains (cdsim.fakeimex).\n"
        "import os, sys\n"
        "here = os.path.dirname(os.path.realpath(__file__))\n"
        f"sys.path.insert(0, os.path.join(here, '..', {LIBRARY!r}))\n"
        f"from cdsim.fakeimex.{role} import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )


def program_of(argv: Sequence[str]) -> str:
    """Which fake a command line runs (``nvidia-imex``, ``nvidia-imex-ctl``); "" for others.

    The kernel runs a script as ``<interpreter> -S <script path> <args...>``.
    """
    if len(argv) < 3 or argv[1] != "-S":
        return ""
    name = pathlib.PurePosixPath(argv[2]).name
    return name if any(name == program for program, _ in PROGRAMS) else ""


def install(bin_dir: pathlib.Path, *, python: str = sys.executable) -> list[pathlib.Path]:
    """Write both programs into ``bin_dir`` and the package beside them; returns the programs.

    ``python``: the interpreter they run with where the agent runs (:data:`IMAGE_PYTHON` in a
    container).
    """
    library = bin_dir.parent / LIBRARY / "cdsim"
    (library / "fakeimex").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PACKAGE_ROOT / "__init__.py", library / "__init__.py")
    for module in (PACKAGE_ROOT / "fakeimex").glob("*.py"):
        shutil.copyfile(module, library / "fakeimex" / module.name)
    bin_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for program, role in PROGRAMS:
        path = bin_dir / program
        path.write_text(script(role, python))
        path.chmod(0o755)
        written.append(path)
    return written
