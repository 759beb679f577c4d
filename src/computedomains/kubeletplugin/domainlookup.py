"""Find the ComputeDomain a claim names, by UID, without watching every domain in the cluster.

A claim's config names its domain by UID only. A workload claim lives in its domain's
namespace, so the lookup lists that namespace; only when the domain is not there (a claim
that borrows another namespace's domain, which prepare refuses, or a daemon claim naming a
domain) does it list every namespace. A UID never changes its name or namespace, so a domain
once found is remembered, and whether it still exists is asked again (one GET) at most every
:data:`RECHECK_SECONDS`: the kubelet plugin keeps no cluster-wide ComputeDomain cache, which
would grow with the cluster on every node.

Each object read is parsed once into a :class:`computedomains.api.domainview.Domain`
(``Domain.peek``: the plugin needs its identity only), which is what the lookup returns.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from computedomains.api import domainview, resources
from computedomains.kube import client

RECHECK_SECONDS = 10.0
"""How long a domain found is taken to exist without asking again. A prepare in that window
for a domain deleted meanwhile waits for IMEX (which no longer serves the domain) instead of
being refused at once; the kubelet's next try is."""
REMEMBERED = 256
"""Domains remembered at most (a node serves one domain at a time; this bounds a long life)."""


@dataclasses.dataclass(frozen=True)
class _Found:
    domain: domainview.Domain
    at: float


class DomainLookup:
    """``find(uid, namespace)``: the ComputeDomain with ``uid``, or None; thread-safe."""

    def __init__(self, api: client.Client, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._clock = clock
        self._lock = threading.Lock()
        self._found: dict[str, _Found] = {}

    def find(self, uid: str, namespace: str = "") -> domainview.Domain | None:
        """The domain with ``uid``, looked for in ``namespace`` first ("": everywhere)."""
        with self._lock:
            known = self._found.get(uid)
        if known is not None and self._clock() - known.at < RECHECK_SECONDS:
            return known.domain
        if known is not None:
            domain = self._read(known.domain)
            if domain is not None and domain.uid != uid:
                domain = None  # deleted, and another domain took its name
        else:
            domain = self._listed(uid, namespace)
        with self._lock:
            if domain is None:
                self._found.pop(uid, None)
            else:
                if len(self._found) >= REMEMBERED:
                    self._found.clear()
                self._found[uid] = _Found(domain, self._clock())
        return domain

    def in_namespace(self, namespace: str) -> Callable[[str], domainview.Domain | None]:
        """``find`` looking in ``namespace`` first: what ``validate.plan`` takes."""
        return lambda uid: self.find(uid, namespace)

    def _read(self, known: domainview.Domain) -> domainview.Domain | None:
        """The object now at ``known``'s name (whichever UID it has), or None."""
        found = self._api.find(
            resources.COMPUTE_DOMAINS.path(known.name, namespace=known.namespace)
        )
        return domainview.Domain.peek(found) if found is not None else None

    def _listed(self, uid: str, namespace: str) -> domainview.Domain | None:
        for scope in dict.fromkeys((namespace, "")):  # the claim's namespace, then all
            listing = self._api.get(resources.COMPUTE_DOMAINS.path(namespace=scope))
            for item in listing.get("items") or []:
                domain = domainview.Domain.peek(item)
                if domain.uid == uid:
                    return domain
        return None
