"""``computedomains controller``."""

from __future__ import annotations

import argparse
from typing import Any

from computedomains import logs
from computedomains.controller import config


def add_parsers(subparsers: Any) -> None:
    """Register the ``controller`` subcommand."""
    parser = subparsers.add_parser(
        "controller", help="run the ComputeDomain controller (templates, slots, cliques, status)"
    )
    config.add_arguments(parser)
    logs.add_flags(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from computedomains.controller import manager  # noqa: PLC0415 - keeps `--help` fast

    logs.configure(args)
    return manager.run(config.from_args(args))
