"""``computedomains imex-agent``."""

from __future__ import annotations

import argparse
from typing import Any

from computedomains import logs
from computedomains.imexagent import config


def add_parsers(subparsers: Any) -> None:
    """Register the ``imex-agent`` subcommand."""
    parser = subparsers.add_parser(
        "imex-agent", help="run the node's IMEX daemon for the node's ComputeDomain"
    )
    config.add_arguments(parser)
    logs.add_flags(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from computedomains.imexagent import agent  # noqa: PLC0415 - keeps `--help` fast

    logs.configure(args)
    return agent.run(config.from_args(args))
