"""Regenerate the message modules: ``python -m computedomains.drapb.generate [--check]``.

Only messages are generated: the services are reached by name through ``services``.
"""

from __future__ import annotations

import argparse
import filecmp
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
SRC = HERE.parents[1]
PROTOS = sorted(HERE.glob("*.proto"))
_GENERATED = ("_pb2.py", "_pb2.pyi")


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    """Compile the protos into ``out`` (a tree rooted like ``src``); returns the files written."""
    from grpc_tools import protoc  # dev-only dependency  # noqa: PLC0415

    bindir = pathlib.Path(sys.executable).parent
    args = [
        "grpc_tools.protoc",
        f"-I{SRC}",
        f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
        f"--python_out={out}",
        f"--mypy_out={out}",
        *(str(p.relative_to(SRC)) for p in PROTOS),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    return sorted(p for p in (out / HERE.relative_to(SRC)).iterdir() if p.name.endswith(_GENERATED))


def _leftovers(made: list[pathlib.Path]) -> list[pathlib.Path]:
    """Generated-looking files here that generation no longer makes (a removed proto's)."""
    names = {f.name for f in made}
    return sorted(p for p in HERE.glob("*_pb2*") if p.name not in names)


def main() -> int:
    """Write the modules next to the protos, or with ``--check`` report whether they are stale."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the modules are stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(pathlib.Path(tmp))
        if args.check:
            stale = [
                f.name
                for f in files
                if not (HERE / f.name).exists() or not filecmp.cmp(f, HERE / f.name, shallow=False)
            ]
            stale += [p.name for p in _leftovers(files)]
            if stale:
                print(f"stale generated modules: {', '.join(stale)}; run `make protos`")
                return 1
            return 0
        for f in files:
            shutil.copyfile(f, HERE / f.name)
            print(f"wrote {HERE / f.name}")
        for leftover in _leftovers(files):
            leftover.unlink()
            print(f"removed {leftover}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
