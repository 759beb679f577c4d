"""Wait for a condition by polling with a deadline, and say what was awaited when it fails."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(TimeoutError):
    """The awaited condition did not hold before the deadline."""


def until(
    what: str,
    check: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.1,
    abort: Callable[[], None] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``check`` until it returns a truthy value and return that value.

    ``abort`` runs before each poll and may raise to stop early (a process died, say).
    Exceptions of the ``retry_on`` types count as "not yet"; the last one is quoted in the
    timeout message, which also names ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        if abort is not None:
            abort()
        try:
            value = check()
        except retry_on as exc:
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error is not None else ""
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)
