"""Install ``nvidia-imex`` and ``nvidia-imex-ctl`` into a simulated node's host tree.

Each is a two-line shell script that execs this Python on the fake, so the agent starts it
by path exactly as it starts the real binary under the driver root. The fake needs only the
standard library, so Python starts without ``site`` (``-S``), the package found through
``PYTHONPATH``, and runs the role's ``main`` through ``-c`` rather than ``-m`` (which imports
runpy): the agent starts ``nvidia-imex-ctl`` for every IMEX check.
"""

from __future__ import annotations

import pathlib
import shlex
import sys

import cdsim

PROGRAMS = (("nvidia-imex", "daemon"), ("nvidia-imex-ctl", "ctl"))
"""(program name, module of :mod:`cdsim.fakeimex` whose ``main`` it runs)."""


PACKAGE_ROOT = pathlib.Path(cdsim.__file__).resolve().parents[1]
"""The folder that holds the ``cdsim`` package (the ``sim/`` tree or site-packages)."""


def script(role: str, python: str, root: pathlib.Path = PACKAGE_ROOT) -> str:
    """The script text for ``role``."""
    return (
        "#!/bin/sh\n"
        "# Simulated cluster: the fake IMEX of compute-domains (cdsim.fakeimex).\n"
        f"PYTHONPATH={shlex.quote(str(root))} "
        f'exec {shlex.quote(python)} -S -c {shlex.quote(entry(role))} "$@"\n'
    )


def entry(role: str) -> str:
    """The ``-c`` program: ``main`` of the role's module (``-m`` would cost runpy's imports)."""
    module = f"cdsim.fakeimex.{role}"
    return f"import sys; from {module} import main; sys.exit(main(sys.argv[1:]))"


def install(
    bin_dir: pathlib.Path, *, python: str = sys.executable, root: pathlib.Path = PACKAGE_ROOT
) -> list[pathlib.Path]:
    """Write both scripts into ``bin_dir`` (created if needed); returns their paths."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for program, role in PROGRAMS:
        path = bin_dir / program
        path.write_text(script(role, python, root))
        path.chmod(0o755)
        written.append(path)
    return written
