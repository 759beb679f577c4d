"""The node's ``resource.nvidia.com/computeDomain`` label, kept equal to what its claims say.

The plugin is the label's single writer, and the label follows the ledger: it names the domain
the node's claims hold it for, and is absent while they hold it for none (:func:`wanted`).
:meth:`NodeLabel.sync` makes it so one write at a time, each decided from the ledger right
before it is sent: every ledger change is followed by a sync, so the last write carries the
last state. The write is a merge patch of this one label without a resourceVersion: the Node
changes all the time (the kubelet's heartbeats, node-init), and a precondition would turn each
of those into a 409 for nothing. The controller's clean-up of a label left by a vanished domain
is the write that carries a precondition (``kube/nodes.remove_label_if``), so it never removes
a label this plugin has just set. A label removed or changed by hand is put back by the next
verifying sync (the periodic collection round, and start-up).
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
        """Held across the decision and its write: one write at a time."""
        self._seen: tuple[str | None] | None = None
        """The label in the last answer of the API server (None: no answer yet)."""

    def sync(self, *, verify: bool = False) -> None:
        """Make the label what the claims say.

        Without ``verify`` it trusts the last answer seen and writes only when that differs
        (the hot path: every prepare and unprepare asks); ``verify`` reads the node first.
        """
        with self._lock:
            target = self._want()
            if not verify and self._seen is not None and self._seen[0] == target:
                return
            if verify or self._seen is None:
                self._seen = (_value(self._api.get(self._path)),)
            current = self._seen[0]
            if current == target:
                return
            node = self._api.patch(self._path, {"metadata": {"labels": {KEY: target}}})
            self._seen = (_value(node),)
            log.info("node label %s: %s -> %s", KEY, current or "-", target or "-")
