"""The controller's view of the cluster: one informer per resource, its reads and snapshots.

What each informer keeps of its objects is :mod:`trimmed`, what it indexes them by
:mod:`indexes`, and which ComputeDomains (the work-queue keys) and nodes a change concerns
:mod:`changekeys`; what the placement turn reads of them is :mod:`turnactivity`. The reads
overlay this replica's own latest writes where it has any. The binder and the turn read
ComputeDomains as :class:`Domain` views, each version peeked once.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, cast

from computedomains.api import constants, models, placement, resources
from computedomains.api.domainview import Domain
from computedomains.controller import changekeys, frozencliques, indexes, objects, trimmed
from computedomains.controller.views import (
    Claim,
    CliqueID,
    NodeInfo,
    NodeName,
    Snapshot,
    agent_of,
    pick_agent_pods,
)
from computedomains.kube import client, wire, writes
from computedomains.kube.informer import Informer


class Caches:
    """Informers over ComputeDomains, Nodes, cliques, agent pods, our templates and claims."""

    def __init__(
        self, api: client.Client, *, namespace: str, on_key: Callable[[str], None],
        on_relist: Callable[[], None],
    ) -> None:  # fmt: skip
        self.namespace = namespace
        self.changes = changekeys.ChangeKeys(self, on_key=on_key, on_relist=on_relist)
        """What each informer's changes concern (it reads these caches back)."""
        changes = self.changes
        self._lock = threading.Lock()
        self._views: dict[str, tuple[dict[str, Any], Domain]] = {}
        """Domain UID → (the cached object, its view): each version is peeked once."""
        self.written_domains = writes.MutationCache()
        self.written_cliques = writes.MutationCache()
        self.domains = Informer(api, path=resources.COMPUTE_DOMAINS.path(),
                                on_relist=changes.domains_relisted,
                                on_change=changes.domain_changed)  # fmt: skip
        # Indexed: one reconcile reads its domain's nodes, agents, cliques and claims, not the
        # whole cluster's (a thousand nodes make that the difference between ms and 100s of ms).
        self.nodes = Informer(
            api, path=resources.NODES.path(), transform=trimmed.node,
            on_change=changes.node_changed, on_relist=changes.nodes_relisted,
            indexes={"name": indexes.name, "domain": indexes.domain_label},
        )  # fmt: skip
        self.cliques = Informer(
            api, path=resources.CLIQUES.path(namespace=namespace),
            label_selector=constants.COMPUTE_DOMAIN_LABEL,
            on_change=changes.clique_changed, on_relist=changes.cliques_relisted,
            indexes={"domain": indexes.domain_label, "node": indexes.listed_nodes,
                     "named": indexes.named_nodes},
        )  # fmt: skip
        self.agents = Informer(
            api, path=resources.PODS.path(namespace=namespace),
            label_selector=objects.AGENT_SELECTOR, transform=trimmed.pod,
            on_change=changes.agent_changed, on_relist=on_relist,
            indexes={"node": indexes.pod_node},
        )  # fmt: skip
        self.templates = Informer(
            api, path=resources.RESOURCE_CLAIM_TEMPLATES.path(),
            label_selector=objects.TEMPLATE_SELECTOR, on_change=changes.template_changed,
            on_relist=on_relist, indexes={"domain": indexes.domain_label},
        )  # fmt: skip
        self.claims = Informer(
            api, path=resources.RESOURCE_CLAIMS.path(), transform=trimmed.claim,
            on_change=changes.claim_changed, on_relist=changes.claims_relisted,
            indexes={"domain": indexes.claim_domain, "node": indexes.claim_node},
        )  # fmt: skip
        self._all = (
            self.domains, self.nodes, self.cliques, self.agents, self.templates, self.claims
        )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------

    def listen(
        self,
        *,
        on_node: Callable[[str], None],
        on_placement: Callable[[], None],
        on_claim: Callable[[dict[str, Any]], None] = lambda _: None,
    ) -> None:
        """Who hears of placement news; before :meth:`start` (the listeners read these caches).

        ``on_node``: a node's holder or claims changed (the binder places its claims anew);
        ``on_placement``: a claim asking for a channel, or a domain, changed (the turn);
        ``on_claim``: a claim asking for a channel was made or changed (as cached).
        """
        self.changes.listen(on_node=on_node, on_placement=on_placement, on_claim=on_claim)

    def start(self) -> None:
        """Start every informer."""
        for informer in self._all:
            informer.start()

    def stop(self) -> None:
        """Stop every informer."""
        for informer in self._all:
            informer.stop()

    def wait_synced(self, timeout: float) -> None:
        """Block until every informer has listed once."""
        for informer in self._all:
            informer.wait_synced(timeout)

    # -- reads ----------------------------------------------------------------------------

    def forget_writes(self) -> None:
        """Forget this replica's own writes (a new leadership term: others wrote since)."""
        self.written_domains.clear()
        self.written_cliques.clear()

    def domain_uids(self) -> list[str]:
        """Every known ComputeDomain."""
        return [d.uid for d in self.domain_views()]

    def domain_views(self) -> list[Domain]:
        """Every known ComputeDomain as a view of its identity and lifecycle (``Domain.peek``)."""
        views = [self._view(d) for d in self.domains.items()]
        with self._lock:
            if len(self._views) > len(views):  # the views of deleted domains go
                known = {v.uid for v in views}
                self._views = {uid: seen for uid, seen in self._views.items() if uid in known}
        return views

    def domain_view(self, uid: str) -> Domain | None:
        """The known ComputeDomain ``uid``'s identity and lifecycle (None: no such domain)."""
        cached = self.domains.by_uid(uid)
        return None if cached is None else self._view(cached)

    def _view(self, raw: dict[str, Any]) -> Domain:
        """``Domain.peek`` of a cached ComputeDomain, made once per version of it.

        The informer stores each version as a new object, so a view made of the very object
        cached now is the view of the version cached now.
        """
        uid = str(raw["metadata"]["uid"])
        with self._lock:
            seen = self._views.get(uid)
        if seen is not None and seen[0] is raw:
            return seen[1]
        view = Domain.peek(raw)
        with self._lock:
            self._views[uid] = (raw, view)
        return view

    def domain(self, uid: str) -> dict[str, Any] | None:
        """The raw ComputeDomain ``uid``, our latest write of it included."""
        cached = self.domains.by_uid(uid)
        overlaid = self.written_domains.overlay([cached] if cached is not None else [])
        return overlaid[0] if overlaid and cached is not None else None

    def cliques_of(self, uid: str) -> dict[CliqueID, dict[str, Any]]:
        """The clique objects of domain ``uid`` by clique ID, our latest writes included."""
        return {
            CliqueID(indexes.label(c, constants.CLIQUE_ID_LABEL)): c
            for c in self.written_cliques.overlay(self.cliques.by_index("domain", uid))
            if indexes.label(c) == uid
        }

    def allocations(
        self, *, node: str = "", domain: str = "", foreign: bool = False
    ) -> list[placement.ChannelAllocation]:
        """Channel allocations in the cache, optionally only those on ``node`` / of ``domain``.

        Only claims that count for their domain (:meth:`counts`); with ``foreign``, only those
        that do not.
        """
        claims = (
            self.claims.by_index("domain", domain) if domain
            else self.claims.by_index("node", node) if node
            else self.claims.items()
        )  # fmt: skip
        found = (placement.parse_claim(c) for c in claims)
        return [
            a
            for a in found
            if a is not None
            and (not node or a.node == node)
            and (not domain or a.domain_uid == domain)
            and self.counts(a.domain_uid, a.namespace) != foreign
        ]

    def namespace_of(self, domain_uid: str) -> str | None:
        """The namespace of the known domain ``domain_uid`` (None: no such domain)."""
        domain = self.domain_view(domain_uid)
        return None if domain is None else domain.namespace

    def counts(self, domain_uid: str, namespace: str) -> bool:
        """Whether a claim in ``namespace`` counts for the domain ``domain_uid`` it names.

        Only in the domain's own namespace.

        The incumbent's rule for channel claims. A claim in another namespace that names a
        domain's UID (written by hand, the UID read off a node label) holds no node and no
        slot of it and never delays its deletion: to the binder it names a domain that does
        not exist. So does a claim naming a deleted domain: it must not keep the domain's
        leftovers (labels, cliques) from going. A domain never seen yet keeps its claims (the
        binder refuses them).
        """
        known = self.namespace_of(domain_uid)
        if known is None:
            known = self.changes.namespace_seen(domain_uid)
        return known is None or known == namespace

    def _holds(self, allocation: placement.ChannelAllocation) -> bool:
        """The claim's domain holds its node (``placement.holder``)."""
        on_node = self.allocations(node=allocation.node)
        recorded = self.recorded(allocation.node)
        return placement.holder(recorded=recorded, allocations=on_node) == allocation.domain_uid

    def recorded(self, node: str) -> str:
        """The domain the membership record names for ``node`` ("" none, or unclear)."""
        # The overlay wants the informer's copy of everything we wrote (to tell which of our
        # writes it has seen since), not only the objects that name the node now.
        found = {str(c["metadata"].get("uid")): c for c in self.cliques.by_index("named", node)}
        for uid in self.written_cliques.uids() - found.keys():
            if (cached := self.cliques.by_uid(uid)) is not None:
                found[uid] = cached
        overlaid = self.written_cliques.overlay(found.values())
        naming = {indexes.label(c): c for c in overlaid if node in indexes.named_nodes(c)}
        return placement.recorded_holder(node, naming)

    def node_label(self, name: str) -> str:
        """The computeDomain label of node ``name`` as last seen ("" absent or unknown)."""
        return self.changes.node_label(name)

    def template_state(self, domain: Domain) -> tuple[bool, bool]:
        """(present, outdated) of our workload template of ``domain`` in the cache.

        Outdated: made by a controller from before placement (no selector of the domain's
        hold), so its claims could land on a node another domain holds; a template's spec is
        immutable, so it is deleted and made again.
        """
        for t in self.templates.by_index("domain", domain.uid):
            meta = t["metadata"]
            if (meta.get("namespace"), meta.get("name")) == (domain.namespace, domain.template):
                return True, not objects.template_current(t, domain)
        return False, False

    def snapshot(self, raw: dict[str, Any], *, now: str) -> Snapshot:
        """Everything a reconcile of the ComputeDomain ``raw`` decides on, at time ``now``."""
        domain = Domain.parse(raw)
        present, outdated = self.template_state(domain)
        cliques: dict[CliqueID, tuple[models.CliqueDaemon, ...]] = {}
        named: dict[CliqueID, frozenset[str] | None] = {}
        for clique, obj in self.cliques_of(domain.uid).items():
            # An unreadable or newer-schema clique keeps its slots: frozencliques.Frozen.
            cliques[clique] = frozencliques.read(obj)
            named[clique] = models.clique_members(obj)
        listed = {d.node_name for ds in cliques.values() for d in ds}
        claims: dict[str, Claim] = {}
        for allocation in self.allocations(domain=domain.uid):
            state = (
                Claim.NONE if allocation.refused or allocation.pending
                else Claim.HELD if self._holds(allocation)
                else Claim.ALLOCATED
            )  # fmt: skip
            if state is not Claim.NONE and claims.get(allocation.node) is not Claim.HELD:
                claims[allocation.node] = state
        labelled = {str(n["metadata"]["name"]) for n in self.nodes.by_index("domain", domain.uid)}
        nodes: dict[NodeName, NodeInfo] = {}
        for name in sorted(labelled | listed | set(claims)):
            for node in self.nodes.by_index("name", name):
                info = NodeInfo.parse(cast(wire.Node, node))
                nodes[info.name] = dataclasses.replace(
                    info, claim=claims.get(info.name, Claim.NONE)
                )
        pods = [cast(wire.Pod, p) for name in nodes for p in self.agents.by_index("node", name)]
        agents = {
            n: agent_of(p, node_domain=nodes[n].domain)
            for n, p in pick_agent_pods(pods).items()
            if n in nodes
        }
        return Snapshot(
            domain=domain,
            nodes=nodes,
            agents=agents,
            cliques=cliques,
            clique_members=named,
            template_present=present,
            now=now,
            template_outdated=outdated,
        )
