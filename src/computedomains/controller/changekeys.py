"""Which ComputeDomains (work-queue keys) and nodes each change in the caches concerns.

Every change is mapped to the ComputeDomains it concerns (their UIDs are the work-queue
keys): a node to the domain in its label now and the one it had before (and to none when
neither its domain nor its clique label changed: node heartbeats cost nothing); an agent pod
to the domain of its node and to every domain whose cliques list that node; a clique or
template to the domain in its label, and a clique that names other members to the domains with
claims on those nodes and to the nodes (whose holder it records); a ResourceClaim with our
channel devices to its domain (before and after the change) and to its node, whose placement
the binder decides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from computedomains.api import constants, placement
from computedomains.api.domainview import Domain
from computedomains.controller import indexes
from computedomains.kube.informer import Informer

REMEMBERED_DOMAINS = 16384
"""How many domains' namespaces are remembered (a UID and a name: a few MB at most)."""


class Store(Protocol):
    """What the change keys read of the caches (:class:`caches.Caches`)."""

    domains: Informer
    nodes: Informer
    cliques: Informer

    def allocations(
        self, *, node: str = "", domain: str = "", foreign: bool = False
    ) -> list[placement.ChannelAllocation]:
        """Channel allocations in the cache (``Caches.allocations``)."""


def placement_key(allocation: placement.ChannelAllocation | None) -> tuple[str, str, str]:
    """(domain, node, binding state) of a claim's allocation: a change of none is no news."""
    if allocation is None:
        return ("", "", "")
    state = (
        "pending" if allocation.pending else "refused" if allocation.refused
        else "granted" if allocation.granted else "allocated"
    )  # fmt: skip
    return (allocation.domain_uid, allocation.node, state)


def membership(node: dict[str, Any]) -> tuple[str, str]:
    """(domain, clique) label values of a node."""
    return indexes.label(node), indexes.label(node, constants.CLIQUE_LABEL)


class ChangeKeys:
    """The informers' change handlers: each names the domains and nodes it concerns."""

    def __init__(
        self, store: Store, *, on_key: Callable[[str], None], on_relist: Callable[[], None]
    ) -> None:
        self._store = store
        self._on_key = on_key
        self._on_relist = on_relist
        self._on_node: Callable[[str], None] = lambda _: None
        self._on_placement: Callable[[], None] = lambda: None
        self._on_claim: Callable[[dict[str, Any]], None] = lambda _: None
        self._lock = threading.Lock()
        self._placed: dict[str, tuple[str, str, str]] = {}
        """(domain, node, binding state) of each claim with our channel devices, last seen."""
        self._membership: dict[str, tuple[str, str]] = {}
        """(domain, clique) label values last seen per node: a removed label still names
        its old domain, and a change of neither is no news."""
        self._named: dict[str, tuple[str, ...]] = {}
        """Clique object UID → the members it named when last seen (``recorded``)."""
        self._namespaces: dict[str, str] = {}
        """Domain UID → its namespace, of every domain seen, deleted ones included (up to
        :data:`REMEMBERED_DOMAINS`): a claim naming a deleted domain still counts only in its
        namespace (``Caches.counts``)."""

    def listen(
        self,
        *,
        on_node: Callable[[str], None],
        on_placement: Callable[[], None],
        on_claim: Callable[[dict[str, Any]], None],
    ) -> None:
        """Who hears of placement news (``Caches.listen``)."""
        self._on_node, self._on_placement, self._on_claim = on_node, on_placement, on_claim

    # -- what the caches read back --------------------------------------------------------

    def node_label(self, name: str) -> str:
        """The computeDomain label of node ``name`` as last seen ("" absent or unknown)."""
        with self._lock:
            return self._membership.get(name, ("", ""))[0]

    def namespace_seen(self, domain_uid: str) -> str | None:
        """The namespace domain ``domain_uid`` had when last seen (None: never seen)."""
        with self._lock:
            return self._namespaces.get(domain_uid)

    # -- change → keys --------------------------------------------------------------------

    def _key(self, uid: str) -> None:
        if uid:
            self._on_key(uid)

    def domain_changed(self, kind: str, domain: dict[str, Any]) -> None:
        """A ComputeDomain changed: its own key, and the turn decides again."""
        view = Domain.peek(domain)
        self._remember([view])
        self._key(view.uid)
        self._on_placement()

    def domains_relisted(self) -> None:
        """The ComputeDomains were listed anew."""
        self._remember(Domain.peek(d) for d in self._store.domains.items())
        self._on_relist()

    def _remember(self, domains: Iterable[Domain]) -> None:
        with self._lock:
            for domain in domains:
                self._namespaces.pop(domain.uid, None)  # to the end: least recently seen go first
                self._namespaces[domain.uid] = domain.namespace
            while len(self._namespaces) > REMEMBERED_DOMAINS:
                del self._namespaces[next(iter(self._namespaces))]

    def node_changed(self, kind: str, node: dict[str, Any]) -> None:
        """A Node changed: the domains of its label before and now, and those listing it."""
        name = str(node["metadata"].get("name", ""))
        now = ("", "") if kind == "DELETED" else membership(node)
        with self._lock:
            before = self._membership.pop(name, ("", ""))
            if kind != "DELETED":
                self._membership[name] = now
        if kind == "MODIFIED" and now == before:
            return  # a heartbeat or another label: nothing the controller decides on
        # The old and new label's domains put the label right (it is the record's copy).
        for uid in {before[0], now[0], *self._listing_domains(name)}:
            self._key(uid)

    def nodes_relisted(self) -> None:
        """The Nodes were listed anew."""
        seen = {str(n["metadata"].get("name")): membership(n) for n in self._store.nodes.items()}
        with self._lock:
            self._membership = seen
        self._on_relist()

    def clique_changed(self, kind: str, clique: dict[str, Any]) -> None:
        """A clique object changed: its domain, and each node it names or stopped naming."""
        self._key(indexes.label(clique))
        uid = str(clique["metadata"].get("uid", ""))
        now = () if kind == "DELETED" else indexes.named_nodes(clique)
        with self._lock:
            before = self._named.pop(uid, ())
            if kind != "DELETED":
                self._named[uid] = now
        for node in set(before) ^ set(now):
            self._recorded_changed(node)

    def cliques_relisted(self) -> None:
        """The clique objects were listed anew."""
        named = {
            str(c["metadata"].get("uid", "")): indexes.named_nodes(c)
            for c in self._store.cliques.items()
        }
        with self._lock:
            self._named = named
        self._on_relist()

    def template_changed(self, kind: str, template: dict[str, Any]) -> None:
        """One of our workload templates changed: the domain of its label."""
        self._key(indexes.label(template))

    def _recorded_changed(self, node: str) -> None:
        """The record of ``node``'s holder changed: decide its claims' domains and places again."""
        for uid in self._claiming(node):
            self._key(uid)
        self._on_node(node)

    def _claiming(self, node: str) -> set[str]:
        """Domains with a claim allocated on ``node``: who holds it is theirs to decide anew."""
        return {a.domain_uid for a in self._store.allocations(node=node)}

    def claim_changed(self, kind: str, claim: dict[str, Any]) -> None:
        """A ResourceClaim changed: the domains and nodes of its allocation before and now."""
        uid = str(claim["metadata"].get("uid", ""))
        if placement.asks_for_a_channel(claim):
            self._on_placement()
            if kind != "DELETED":
                self._on_claim(claim)
        allocation = None if kind == "DELETED" else placement.parse_claim(claim)
        now = placement_key(allocation)
        with self._lock:
            before = self._placed.pop(uid, ("", "", ""))
            if allocation is not None:
                self._placed[uid] = now
        if now == before:
            return  # e.g. the kubelet reserving it for one more pod
        for domain in {before[0], now[0]}:
            self._key(domain)
        for node in {before[1], now[1]} - {""}:
            # Another domain's claim there may hold the node now (this one left, or lost it).
            self._recorded_changed(node)

    def claims_relisted(self) -> None:
        """The ResourceClaims were listed anew: every node with a claim is news to the binder."""
        # Foreign claims too, as claim_changed tracks them: the binder must answer (refuse)
        # those waiting after a relist as well.
        every = [*self._store.allocations(), *self._store.allocations(foreign=True)]
        placed = {a.uid: placement_key(a) for a in every}
        with self._lock:
            self._placed = placed
        for node in {key[1] for key in placed.values()}:
            self._on_node(node)
        self._on_relist()

    def agent_changed(self, kind: str, pod: dict[str, Any]) -> None:
        """An agent pod changed: the domain of its node's label and those listing the node."""
        name = str(pod.get("spec", {}).get("nodeName", ""))
        with self._lock:
            current = self._membership.get(name, ("", ""))[0]
        for uid in {current, *self._listing_domains(name)}:
            self._key(uid)

    def _listing_domains(self, node: str) -> set[str]:
        """Domains whose cliques list ``node``."""
        return {indexes.label(c) for c in self._store.cliques.by_index("node", node)}
