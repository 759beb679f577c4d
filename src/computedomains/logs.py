"""How every component and hook logs: one line per record, as text or as JSON.

Two flags, each with its environment twin (:mod:`computedomains.flags`):

- ``-v N`` / ``--verbosity N``: 0 logs INFO and above; 1 adds our DEBUG lines (each API
  retry, each decision's inputs); 2 adds the libraries' DEBUG lines too (urllib3, gRPC);
- ``--log-format text|json``: ``text`` is ``<time> <level> <logger>: <message>``
  (:data:`FORMAT`); ``json`` is one object per line with ``time``, ``level``, ``logger`` and
  ``message`` (and ``exception`` when there is one), for a log pipeline.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from typing import TextIO

from computedomains import flags

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""``<time> <level> <logger>: <message>``; :mod:`computedomains.trace` parses its lines by it."""
BARE = "%(message)s"
"""Progress lines in text: each already names its program (``preflight: ...``)."""
FORMATS = ("text", "json")
OURS = "computedomains"
"""The loggers ``-v 1`` opens to DEBUG."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        body = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, separators=(",", ":"))


def _verbosity(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 9:
        raise argparse.ArgumentTypeError(f"must be 0..9, got {value}")
    return number


LOG_FORMAT = flags.Flag(
    "--log-format", "log lines as text or as JSON objects", "text", choices=FORMATS
)
VERBOSITY = flags.Flag(
    "--verbosity",
    "0: INFO and above; 1: our DEBUG lines too; 2: the libraries' as well",
    "0",
    _verbosity,
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``-v``/``--verbosity`` and ``--log-format``."""
    flags.register(parser, LOG_FORMAT)
    flags.register(parser, VERBOSITY)
    parser.add_argument("-v", dest="verbosity", type=_verbosity, default=argparse.SUPPRESS,
                        help="short for --verbosity")  # fmt: skip


def configure(args: argparse.Namespace | None = None, *, progress: str | None = None) -> None:
    """Set up logging from :func:`add_flags`' flags (a process calls it once, at start).

    Records go to stderr. ``progress`` names a logger whose records are the program's own
    progress lines (a hook's, node-init's): those go to stdout instead, in text as the bare
    message (it names its program already).
    """
    verbosity = int(getattr(args, "verbosity", 0) or 0)
    as_json = getattr(args, "log_format", "text") == "json"
    root = logging.getLogger()
    _route(root, sys.stderr, JsonFormatter() if as_json else logging.Formatter(FORMAT))
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
    logging.getLogger(OURS).setLevel(logging.DEBUG if verbosity >= 1 else logging.NOTSET)
    if progress is not None:
        own = logging.getLogger(progress)
        _route(own, sys.stdout, JsonFormatter() if as_json else logging.Formatter(BARE))
        own.propagate = False


def _route(logger: logging.Logger, stream: TextIO, formatter: logging.Formatter) -> None:
    """``logger``'s one handler: ``stream`` in ``formatter``."""
    for old in list(logger.handlers):
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger.addHandler(handler)
