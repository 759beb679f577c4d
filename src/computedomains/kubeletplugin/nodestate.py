"""What the plugin reads from its node: the fabric verdict and the IMEX status (files only).

Both files are written by other components (node-init, the IMEX agent); the plugin never
queries NVML itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import pathlib
import threading
import time
from collections.abc import Callable

from computedomains import nodefiles
from computedomains.api import fabricverdict, imex

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FabricHold:
    """What the plugin remembers between two reads of the verdict file."""

    kept: fabricverdict.NodeFabric | None = None
    """The last usable verdict read: what an unreadable file is taken to say, for a while."""
    unreadable_since: float | None = None
    """Monotonic time of the first of the current run of unreadable reads."""


def hold(
    state: FabricHold, read: fabricverdict.NodeFabric, *, now: float, grace: fabricverdict.Grace
) -> tuple[fabricverdict.NodeFabric, FabricHold]:
    """The verdict to act on after reading ``read``, and what to remember for the next read.

    An unreadable file (a torn copy by hand, a full disk) says nothing about the fabric, and
    taking the node's channels away would stop IMEX under a running job: the last usable
    verdict stands for ``grace.seconds``. Only the time bound applies, since the plugin reads
    on every prepare and slice sync, so a count of reads says nothing about how long a fault
    lasted. Anything readable is taken as it is, an unusable verdict included: node-init has
    ridden out the fault it saw before writing that.
    """
    if read.reason != fabricverdict.UNREADABLE_REASON:
        return read, FabricHold(kept=read if read.usable else None)
    since = now if state.unreadable_since is None else state.unreadable_since
    if state.kept is not None and now - since < grace.seconds:
        return state.kept, FabricHold(kept=state.kept, unreadable_since=since)
    return read, FabricHold(unreadable_since=since)


class FabricTracker:
    """Reads the verdict file through :func:`hold`; one per plugin, shared by all its readers."""

    def __init__(
        self,
        path: pathlib.Path,
        *,
        grace: fabricverdict.Grace,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._grace = grace
        self._clock = clock
        self._lock = threading.Lock()
        self._state = FabricHold()

    def read(self) -> fabricverdict.NodeFabric:
        """The verdict to act on now."""
        # Read under the lock too: two readers must not apply their reads out of order.
        with self._lock:
            read = fabricverdict.read_node(self._path)
            before = self._state
            current, self._state = hold(before, read, now=self._clock(), grace=self._grace)
        if current is not read and before.unreadable_since is None:
            log.warning(
                "keeping the last usable fabric verdict for up to %gs: %s",
                self._grace.seconds,
                read.message,
            )
        return current


def read_imex(path: pathlib.Path) -> imex.ImexStatus | None:
    """The IMEX status, None while there is none (or it is being rewritten badly)."""
    try:
        return imex.read_status(path)
    except nodefiles.CorruptNodeFile:
        return None


def imex_not_ready(
    status: imex.ImexStatus | None,
    domain_uid: str,
    *,
    now: datetime.datetime,
    max_age: float,
) -> str:
    """Why the node's IMEX cannot serve ``domain_uid`` now, in words; "" when it can.

    It can when the status is fresh by the contract's rule and says READY for that domain: a
    READY whose heartbeat stopped is a dead agent's, and IMEX died with it.
    """
    if status is None:
        return "no IMEX status yet"
    stale = imex.staleness(status, now=now, max_age=max_age)
    if stale:
        return stale
    if status.domain_uid == domain_uid and status.state is imex.State.READY:
        return ""
    detail = f": {status.message}" if status.message else ""
    return f"IMEX is {status.state.value} for domain {status.domain_uid or '-'}{detail}"
