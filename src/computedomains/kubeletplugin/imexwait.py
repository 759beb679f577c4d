"""Wait, bounded, for this node's IMEX domain to be READY: where prepare looks at IMEX."""

from __future__ import annotations

import datetime
import pathlib
import time
from collections.abc import Callable

from computedomains.kubeletplugin import errors, nodestate, validate

POLL_SECONDS = 0.02
"""A file poll: the agent writes the status, nothing can notify us."""


def wait_ready(
    plan: validate.Plan,
    *,
    status_file: pathlib.Path,
    node_name: str,
    until: float,
    max_age: float,
    check: Callable[[], None],
) -> bool:
    """Return once a fresh IMEX status says READY for the plan's domain; True after a wait.

    ``max_age`` is the freshness bound (:func:`computedomains.api.imex.staleness`): a READY
    with an older heartbeat is a dead agent's. ``until`` is a ``time.monotonic()`` deadline,
    after which the claim is answered "retry later" (:class:`errors.Retryable`). ``check``
    runs before every poll and raises to stop waiting (the claim was unprepared or deleted
    meanwhile).
    """
    waited = False

    def not_ready() -> str:
        now = datetime.datetime.now(datetime.UTC)
        status = nodestate.read_imex(status_file)
        return nodestate.imex_not_ready(status, plan.domain_uid, now=now, max_age=max_age)

    seen = not_ready()
    while seen:
        check()
        if time.monotonic() >= until:
            raise errors.Retryable(
                "ImexNotReady",
                f"{plan.domain_label} is not ready on node "
                f"{node_name} yet ({seen}); the kubelet will retry",
            )
        waited = True
        time.sleep(POLL_SECONDS)
        seen = not_ready()
    return waited
