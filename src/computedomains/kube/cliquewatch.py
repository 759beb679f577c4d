"""Watch the ComputeDomainClique objects of one NVLink clique: the node's own.

A node's kubelet plugin and IMEX agent care only about the domains of their own clique, so
each watches those objects (one label selector) rather than every clique of the cluster. The
clique follows the fabric verdict: when node-init moves the node, the watch moves with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from computedomains import waiting
from computedomains.api import constants, models, resources
from computedomains.kube import client
from computedomains.kube.informer import Informer


class CliqueWatch:
    """The clique objects of the node's clique, by domain UID; thread-safe."""

    def __init__(
        self, api: client.Client, *, namespace: str, on_change: Callable[[], None]
    ) -> None:
        """Watch nothing until :meth:`follow` names a clique.

        ``namespace`` is the driver's, where the controller writes the clique objects;
        ``on_change`` runs on every change and after every full list.
        """
        self._api = api
        self._namespace = namespace
        self._on_change = on_change
        self._lock = threading.Lock()
        self._clique_id = ""
        self._informer: Informer | None = None

    def follow(self, clique_id: str) -> None:
        """Watch ``clique_id``'s objects from now on ("": the node is in no clique)."""
        with self._lock:
            if clique_id == self._clique_id:
                return
            if self._informer is not None:
                self._informer.stop()
            self._clique_id, self._informer = clique_id, None
            if clique_id:
                self._informer = Informer(
                    self._api,
                    path=resources.CLIQUES.path(namespace=self._namespace),
                    # A rollback to 0.1.x serves v1beta1 only; an OnDelete agent of this
                    # release may still run there.
                    fallback_paths=(resources.CLIQUES_V1BETA1.path(namespace=self._namespace),),
                    label_selector=f"{constants.CLIQUE_ID_LABEL}={clique_id}",
                    on_change=lambda kind, obj: self._on_change(),
                    on_relist=self._on_change,
                )
                self._informer.start()

    def stop(self) -> None:
        """Stop watching."""
        self.follow("")

    def listed(self) -> bool:
        """Whether the objects are known: the clique's first list is in (or there is none)."""
        with self._lock:
            return self._informer is None or self._informer.synced()

    def wait_listed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for :meth:`listed`; returns whether it is."""
        with self._lock:
            informer = self._informer
        if informer is None:
            return True
        try:
            informer.wait_synced(timeout)
        except waiting.WaitTimeout:
            return False
        return True

    def by_domain(self) -> dict[str, dict[str, Any]]:
        """The clique's objects by their domain's UID (empty while the node has no clique)."""
        with self._lock:
            clique_id, informer = self._clique_id, self._informer
        return by_domain(informer.items() if informer is not None else (), clique_id)


def by_domain(objects: Iterable[dict[str, Any]], clique_id: str) -> dict[str, dict[str, Any]]:
    """``clique_id``'s objects among ``objects``, by their domain's UID.

    An object counts only under the name the controller gives it (``<domain UID>.<clique>``).
    """
    found: dict[str, dict[str, Any]] = {}
    for obj in objects:
        meta = obj.get("metadata", {})
        uid = str((meta.get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL, ""))
        if uid and meta.get("name") == models.clique_name(uid, clique_id):
            found[uid] = obj
    return found


def read(api: client.Client, *, namespace: str, clique_id: str) -> dict[str, dict[str, Any]]:
    """``clique_id``'s objects by domain UID, listed once (for a reader that keeps no watch)."""
    listing = api.get(
        resources.CLIQUES.path(namespace=namespace),
        query={"labelSelector": f"{constants.CLIQUE_ID_LABEL}={clique_id}"},
    )
    return by_domain(listing.get("items") or [], clique_id)
