"""``computedomains node-init``: parse, build the settings once, run."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import types
from typing import Any

from computedomains import flags, logs

from . import run, settings

PROGRESS = "computedomains.nodeinit.progress"
"""The logger of node-init's progress lines."""


def add_parsers(subparsers: Any) -> None:
    """Register the ``node-init`` subcommand."""
    parser = subparsers.add_parser(
        "node-init",
        help="check this node's NVLink fabric; label, condition and taint the Node",
        description=(
            "Discovers the NVLink fabric, waits a bounded grace while registration is in "
            "progress, writes the FabricVerdict file and sets the clique label, the fabric "
            "condition and (for a broken fabric) the taint. Exits 0 whatever the verdict."
        ),
    )
    flags.add_to(parser, settings.Settings)
    logs.add_flags(parser)
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    config = flags.build(settings.Settings, args)
    stop = threading.Event()

    def _stop(signum: int, _frame: types.FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    # Its lines go to stdout as before (the init container's log), as text or JSON.
    logs.configure(args, progress=PROGRESS)
    out = logging.getLogger(PROGRESS)
    return run.run(config, stop=stop, log=lambda line: out.info("node-init: %s", line),
                   warn=lambda line: out.warning("node-init: %s", line))  # fmt: skip
