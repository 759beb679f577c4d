"""Log lines shaped like nvidia-imex's: ``[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] text``.

They go to stderr (``LOG_FILE_NAME`` empty, as the agent configures it), where the agent
reads them and quotes the last error in the node's IMEX status.
"""

from __future__ import annotations

import sys
import threading
import time


def line(level: str, text: str) -> str:
    """One log line at ``level`` (``INFO``, ``WARN``, ``ERROR``)."""
    stamp = time.strftime("%b %d %Y %H:%M:%S")
    return f"[{stamp}] [{level}] [tid {threading.get_native_id()}] {text}"


def emit(level: str, text: str) -> None:
    """Write one log line to stderr, flushed: the reader may be waiting for it."""
    print(line(level, text), file=sys.stderr, flush=True)
