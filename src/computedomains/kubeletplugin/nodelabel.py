"""The node's ``resource.nvidia.com/computeDomain`` label, kept equal to what its claims say.

The plugin is the label's single writer, and the label follows the ledger: it names the domain
the node's claims hold it for, and is absent while they hold it for none (:func:`wanted`).
:meth:`NodeLabel.sync` makes it so without holding a lock across the API call: each write
carries the resourceVersion it was decided on and is followed by a look at the answer, so a
writer that decided on an older state either conflicts or sees the newer state and writes
again. A label removed or changed by hand is put back by the next verifying sync (the periodic
collection round, and start-up).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from computedomains.api import constants
from computedomains.kube import client as kube_client
from computedomains.kube import nodes as kube_nodes
from computedomains.kubeletplugin import checkpoint

log = logging.getLogger(__name__)
KEY = constants.COMPUTE_DOMAIN_LABEL
_ATTEMPTS = 5


def wanted(entries: Iterable[checkpoint.ClaimEntry]) -> str | None:
    """The domain the label must name: the one the node's claims hold it for (None: no label).

    Claims of two domains never hold a node together (``validate.other_holder``); should a
    rebuild find both, the choice is at least stable.
    """
    held = {e.domain_uid for e in entries if e.holds_node()}
    return min(held) if held else None


def _value(node: dict[str, Any]) -> str | None:
    value = (node["metadata"].get("labels") or {}).get(KEY)
    return str(value) if value is not None else None


class NodeLabel:
    """Writes this node's domain label; ``want`` says what it should be now."""

    def __init__(
        self, api: kube_client.Client, *, node_name: str, want: Callable[[], str | None]
    ) -> None:
        self._api = api
        self._path = kube_nodes.path(node_name)
        self._want = want
        self._lock = threading.Lock()
        """Guards :attr:`_seen` only; never held across an API call."""
        self._seen: tuple[str | None] | None = None
        """The label in the last answer of the API server (None: no answer yet)."""

    def sync(self, *, verify: bool = False) -> None:
        """Make the label what the claims say.

        Without ``verify`` it trusts the last answer seen and writes only when that differs
        (the hot path: every prepare and unprepare asks); ``verify`` reads the node first.
        """
        if not verify:
            with self._lock:
                if self._seen is not None and self._seen[0] == self._want():
                    return
        node = self._api.get(self._path)
        for attempt in range(_ATTEMPTS):
            current = _value(node)
            with self._lock:
                # Decided after the answer came: a change made meanwhile is seen here.
                target = self._want()
                self._seen = (current,)
            if current == target:
                return
            body = {
                "metadata": {
                    "resourceVersion": node["metadata"]["resourceVersion"],
                    "labels": {KEY: target},
                }
            }
            try:
                node = self._api.patch(self._path, body)
            except kube_client.ApiError as exc:
                if exc.status != kube_client.CONFLICT or attempt == _ATTEMPTS - 1:
                    raise
                node = self._api.get(self._path)
                continue
            log.info("node label %s: %s -> %s", KEY, current or "-", target or "-")
        log.warning("node label %s kept changing; the next sync goes on", KEY)
