"""How every long-running component logs: one line per record, to stderr."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""``<time> <level> <logger>: <message>``; :mod:`computedomains.trace` parses its lines by it."""


def configure() -> None:
    """Log INFO and above in :data:`FORMAT` (a component calls it once, at start)."""
    logging.basicConfig(level=logging.INFO, format=FORMAT)
