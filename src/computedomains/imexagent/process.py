"""One ``nvidia-imex`` child: started, its output read, its exit awaited, stopped by signal.

A waiter thread blocks in ``wait()`` and calls back when the child exits, so nothing polls
for its death. A reader thread copies IMEX's output into the agent's log and keeps the last
lines, from which :func:`error_text` picks the error IMEX printed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence

from computedomains import parentdeath

log = logging.getLogger(__name__)
_KEPT_LINES = 50
_LOG_PREFIX = re.compile(r"^\[[^\]]*\] \[(?P<level>[A-Z]+)\] \[tid \d+\] (?P<text>.*)$")


def error_text(lines: Sequence[str]) -> str:
    """The text of the last error IMEX logged, else its last line ("" when silent)."""
    for line in reversed(lines):
        match = _LOG_PREFIX.match(line)
        if match is not None and match["level"] in ("ERROR", "FATAL"):
            return match["text"]
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def exit_text(returncode: int, lines: Sequence[str]) -> str:
    """How IMEX ended, in words, with its last error."""
    if returncode < 0:
        how = f"nvidia-imex was killed by {signal.Signals(-returncode).name}"
    else:
        how = f"nvidia-imex exited with code {returncode}"
    error = error_text(lines)
    return f"{how}: {error}" if error else how


class ImexProcess:
    """A running ``nvidia-imex``; ``on_exit`` is called (from a thread) when it ends."""

    def __init__(self, argv: Sequence[str], *, on_exit: Callable[[], None]) -> None:
        self.argv = tuple(argv)
        self.exited = threading.Event()
        self.stopping = False
        """Set before the agent stops it: that exit is not a crash."""
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self._lock = threading.Lock()
        self._popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C meant for the agent must not reach IMEX directly.
            start_new_session=True,
            # Dies with the agent. The agent starts IMEX from its main loop thread only, which
            # lives as long as the agent does (the kernel ties the signal to that thread).
            preexec_fn=parentdeath.die_with_parent(),  # noqa: PLW1509 - only prctl in the child
        )
        reader = threading.Thread(target=self._read, name="imex-output", daemon=True)
        reader.start()
        threading.Thread(
            target=self._wait, args=(reader, on_exit), name="imex-wait", daemon=True
        ).start()

    @property
    def pid(self) -> int:
        """The child's PID."""
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it exited (negative: killed by that signal)."""
        return self._popen.returncode if self.exited.is_set() else None

    def output(self) -> list[str]:
        """The last lines IMEX printed."""
        with self._lock:
            return list(self._lines)

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` unless it has exited already."""
        if not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)

    def stop(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; True when SIGKILL was needed."""
        self.stopping = True
        self.signal(signal.SIGTERM)
        if self.exited.wait(timeout):
            return False
        log.warning("nvidia-imex (pid %d) ignored SIGTERM for %gs; killing it", self.pid, timeout)
        self.signal(signal.SIGKILL)
        self.exited.wait(10)
        return True

    def _read(self) -> None:
        assert self._popen.stdout is not None
        with self._popen.stdout:
            for raw in self._popen.stdout:
                line = raw.decode(errors="replace").rstrip()
                log.info("nvidia-imex[%d]: %s", self.pid, line)
                with self._lock:
                    self._lines.append(line)

    def _wait(self, reader: threading.Thread, on_exit: Callable[[], None]) -> None:
        self._popen.wait()
        # The last lines (the error) arrive after the exit is reaped; a grandchild holding
        # the pipe open must not stall the report, hence the bound.
        reader.join(timeout=2)
        self.exited.set()
        on_exit()
