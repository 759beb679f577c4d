"""``computedomains webhook``."""

from __future__ import annotations

import argparse
from typing import Any

from computedomains import logs
from computedomains.webhook import config


def add_parsers(subparsers: Any) -> None:
    """Register the ``webhook`` subcommand."""
    parser = subparsers.add_parser(
        "webhook",
        help="serve ComputeDomain conversion, validation and clique placement (HTTPS)",
    )
    config.add_arguments(parser)
    logs.add_flags(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from computedomains.webhook import service  # noqa: PLC0415 - keeps `--help` fast

    logs.configure(args)
    return service.run(config.from_args(args))
