"""``computedomains kubelet-plugin``."""

from __future__ import annotations

import argparse
from typing import Any

from computedomains import logs
from computedomains.kubeletplugin import config


def add_parsers(subparsers: Any) -> None:
    """Register the ``kubelet-plugin`` subcommand."""
    parser = subparsers.add_parser("kubelet-plugin", help="run the DRA kubelet plugin on a node")
    config.add_arguments(parser)
    logs.add_flags(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from computedomains.kubeletplugin import plugin  # noqa: PLC0415 - keeps `--help` fast

    logs.configure(args)
    return plugin.run(config.from_args(args))
