"""The ``computedomains`` command: one subcommand per component or tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import computedomains
from computedomains.controller import commands as controller_commands
from computedomains.fabric import commands as fabric_commands
from computedomains.imexagent import commands as imexagent_commands
from computedomains.kubeletplugin import commands as kubeletplugin_commands
from computedomains.nodeinit import commands as nodeinit_commands
from computedomains.sim import commands as sim_commands


class _Version(argparse.Action):
    """``--version``, resolved only when asked for (the lookup costs every command startup)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"{parser.prog} {computedomains.version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="computedomains",
        description="ComputeDomains for multi-node NVLink Kubernetes clusters.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    subparsers = parser.add_subparsers(dest="command", required=True)
    sim_commands.add_parsers(subparsers)
    kubeletplugin_commands.add_parsers(subparsers)
    controller_commands.add_parsers(subparsers)
    imexagent_commands.add_parsers(subparsers)
    fabric_commands.add_parsers(subparsers)
    nodeinit_commands.add_parsers(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
