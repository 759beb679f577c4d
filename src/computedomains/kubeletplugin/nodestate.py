"""What the plugin reads from its node: the IMEX status (files only).

The IMEX agent writes it; the fabric verdict node-init writes is read through
``fabricverdict.FabricTracker``, as the agent reads it.
"""

from __future__ import annotations

import datetime
import logging
import pathlib

from computedomains import nodefiles
from computedomains.api import imex

log = logging.getLogger(__name__)


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
    if status.domain_uid and status.domain_uid != domain_uid:
        # The message goes to this claim's tenant: it names nothing of the other domain.
        return f"IMEX is {status.state.value} for another ComputeDomain"
    detail = f": {status.message}" if status.message else ""
    return f"IMEX is {status.state.value} for domain {status.domain_uid or '-'}{detail}"
