"""The controller's view of the cluster: one informer per resource, snapshots, change keys.

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

import dataclasses
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from computedomains.api import constants, imex, models, placement, resources
from computedomains.api.domainview import Domain
from computedomains.controller import frozencliques, objects, turns
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


def _trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Only a node's identity and labels: a large cluster's Nodes would fill the cache."""
    meta = node.get("metadata", {})
    keep = ("name", "uid", "resourceVersion", "labels")
    return {"metadata": {k: meta[k] for k in keep if k in meta}}


def _trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What :func:`views.agent_of` reads of an agent pod: its report and whether it runs."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp", "labels")  # fmt: skip
    trimmed = {k: meta[k] for k in keep if k in meta}
    ours = (imex.DOMAIN_ANNOTATION, imex.START_ANNOTATION)
    annotations = meta.get("annotations") or {}
    trimmed["annotations"] = {k: annotations[k] for k in ours if k in annotations}
    containers = [
        {"name": c["name"], "state": c.get("state") or {}}
        for c in status.get("containerStatuses") or []
        if c.get("name") == imex.AGENT_CONTAINER
    ]
    return {
        "metadata": trimmed,
        "spec": {"nodeName": pod.get("spec", {}).get("nodeName", "")},
        "status": {
            **{k: status[k] for k in ("podIP", "conditions") if k in status},
            "containerStatuses": containers,
        },
    }


_KEPT_REQUEST_FIELDS = ("deviceClassName", "tolerations")
"""What the turn reads of a claim's requests (``placement.asks_for_a_channel``)."""
REMEMBERED_DOMAINS = 16384
"""How many domains' namespaces :class:`Caches` remembers (a UID and a name: a few MB at most)."""


def _generated(claim: dict[str, Any]) -> bool:
    """The claim was made for one pod from a template (it goes when the pod goes)."""
    owners = claim["metadata"].get("ownerReferences") or []
    return any(o.get("kind") == "Pod" and o.get("controller") for o in owners)


def _trim_claim(claim: dict[str, Any]) -> dict[str, Any]:
    """What placement reads of a claim; claims of other drivers keep their identity only.

    A channel claim not allocated yet keeps its config: its domain is placing (``turns``).
    """
    meta = claim.get("metadata", {})
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp")  # fmt: skip
    trimmed: dict[str, Any] = {"metadata": {k: meta[k] for k in keep if k in meta}}
    pod_owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
    if pod_owners:  # generated for a pod (from a template): deleted with it
        trimmed["metadata"]["ownerReferences"] = pod_owners
    if placement.parse_claim(claim) is None and not placement.asks_for_a_channel(claim):
        return trimmed
    status = claim.get("status") or {}
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests = [
        {
            "exactly": {
                k: (r.get("exactly") or {}).get(k) for k in ("deviceClassName", "tolerations")
            }
        }
        for r in devices.get("requests") or []
    ]
    trimmed["spec"] = {"devices": {"config": devices.get("config", []), "requests": requests}}
    trimmed["status"] = {
        k: status[k] for k in ("allocation", "devices", "reservedFor") if k in status
    }
    return trimmed


def _placement_key(allocation: placement.ChannelAllocation | None) -> tuple[str, str, str]:
    if allocation is None:
        return ("", "", "")
    state = (
        "pending" if allocation.pending else "refused" if allocation.refused
        else "granted" if allocation.granted else "allocated"
    )  # fmt: skip
    return (allocation.domain_uid, allocation.node, state)


def _label(obj: dict[str, Any], key: str = constants.COMPUTE_DOMAIN_LABEL) -> str:
    return str((obj.get("metadata", {}).get("labels") or {}).get(key, ""))


def _name(obj: dict[str, Any]) -> tuple[str, ...]:
    return (str(obj["metadata"].get("name", "")),)


def _domain_label(obj: dict[str, Any]) -> tuple[str, ...]:
    value = _label(obj)
    return (value,) if value else ()


def _pod_node(pod: dict[str, Any]) -> tuple[str, ...]:
    node = pod.get("spec", {}).get("nodeName", "")
    return (str(node),) if node else ()


def _listed_nodes(clique: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(d.get("nodeName", "")) for d in clique.get("daemons") or [])


def _claim_domain(claim: dict[str, Any]) -> tuple[str, ...]:
    allocation = placement.parse_claim(claim)
    return (allocation.domain_uid,) if allocation is not None else ()


def _claim_node(claim: dict[str, Any]) -> tuple[str, ...]:
    allocation = placement.parse_claim(claim)
    return (allocation.node,) if allocation is not None else ()


def _named_nodes(clique: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(models.clique_members(clique) or ()))


def _membership(node: dict[str, Any]) -> tuple[str, str]:
    return _label(node), _label(node, constants.CLIQUE_LABEL)


class Caches:
    """Informers over ComputeDomains, Nodes, cliques, agent pods and our templates."""

    def __init__(
        self, api: client.Client, *, namespace: str, on_key: Callable[[str], None],
        on_relist: Callable[[], None],
    ) -> None:  # fmt: skip
        self.namespace = namespace
        self._on_key = on_key
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
        self._landed: dict[str, tuple[str, str]] = {}
        """Claim UID → (node, allocation time) of its allocation whose node has been seen
        recorded (or labelled) for its domain since (``turns``)."""
        self._namespaces: dict[str, str] = {}
        """Domain UID → its namespace, of every domain seen, deleted ones included (up to
        :data:`REMEMBERED_DOMAINS`): a claim naming a deleted domain still counts only in its
        namespace (:meth:`counts`)."""
        self.written_domains = writes.MutationCache()
        self.written_cliques = writes.MutationCache()
        self.domains = Informer(api, path=resources.COMPUTE_DOMAINS.path(),
                                on_relist=self._domains_relisted,
                                on_change=self._domain_changed)  # fmt: skip
        self._on_relist = on_relist
        # Indexed: one reconcile reads its domain's nodes, agents, cliques and claims, not the
        # whole cluster's (a thousand nodes make that the difference between ms and 100s of ms).
        self.nodes = Informer(
            api, path=resources.NODES.path(), transform=_trim_node, on_change=self._node_changed,
            on_relist=self._nodes_relisted, indexes={"name": _name, "domain": _domain_label},
        )  # fmt: skip
        self.cliques = Informer(
            api, path=resources.CLIQUES.path(namespace=namespace),
            label_selector=constants.COMPUTE_DOMAIN_LABEL,
            on_change=self._clique_changed, on_relist=self._cliques_relisted,
            indexes={"domain": _domain_label, "node": _listed_nodes, "named": _named_nodes},
        )  # fmt: skip
        self.agents = Informer(
            api, path=resources.PODS.path(namespace=namespace),
            label_selector=objects.AGENT_SELECTOR, transform=_trim_pod,
            on_change=self._agent_changed, on_relist=on_relist, indexes={"node": _pod_node},
        )  # fmt: skip
        self.templates = Informer(
            api, path=resources.RESOURCE_CLAIM_TEMPLATES.path(),
            label_selector=objects.TEMPLATE_SELECTOR,
            on_change=lambda _, o: self._key(_label(o)), on_relist=on_relist,
            indexes={"domain": _domain_label},
        )  # fmt: skip
        self.claims = Informer(
            api, path=resources.RESOURCE_CLAIMS.path(), transform=_trim_claim,
            on_change=self._claim_changed, on_relist=self._claims_relisted,
            indexes={"domain": _claim_domain, "node": _claim_node},
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
        self._on_node, self._on_placement, self._on_claim = on_node, on_placement, on_claim

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

    # -- change → keys --------------------------------------------------------------------

    def _key(self, uid: str) -> None:
        if uid:
            self._on_key(uid)

    def _domain_changed(self, kind: str, domain: dict[str, Any]) -> None:
        self._remember([domain])
        self._key(domain["metadata"]["uid"])
        self._on_placement()

    def _domains_relisted(self) -> None:
        self._remember(self.domains.items())
        self._on_relist()

    def _remember(self, domains: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            for domain in domains:
                meta = domain["metadata"]
                uid = str(meta["uid"])
                self._namespaces.pop(uid, None)  # to the end: the least recently seen go first
                self._namespaces[uid] = str(meta.get("namespace", ""))
            while len(self._namespaces) > REMEMBERED_DOMAINS:
                del self._namespaces[next(iter(self._namespaces))]

    def _node_changed(self, kind: str, node: dict[str, Any]) -> None:
        name = str(node["metadata"].get("name", ""))
        now = ("", "") if kind == "DELETED" else _membership(node)
        with self._lock:
            before = self._membership.pop(name, ("", ""))
            if kind != "DELETED":
                self._membership[name] = now
        if kind == "MODIFIED" and now == before:
            return  # a heartbeat or another label: nothing the controller decides on
        # The old and new label's domains put the label right (it is the record's copy).
        for uid in {before[0], now[0], *self._listing_domains(name)}:
            self._key(uid)

    def _clique_changed(self, kind: str, clique: dict[str, Any]) -> None:
        self._key(_label(clique))
        uid = str(clique["metadata"].get("uid", ""))
        now = () if kind == "DELETED" else _named_nodes(clique)
        with self._lock:
            before = self._named.pop(uid, ())
            if kind != "DELETED":
                self._named[uid] = now
        for node in set(before) ^ set(now):
            self._recorded_changed(node)

    def _cliques_relisted(self) -> None:
        named = {str(c["metadata"].get("uid", "")): _named_nodes(c) for c in self.cliques.items()}
        with self._lock:
            self._named = named
        self._on_relist()

    def _recorded_changed(self, node: str) -> None:
        """The record of ``node``'s holder changed: decide its claims' domains and places again."""
        for uid in self._claiming(node):
            self._key(uid)
        self._on_node(node)

    def _claiming(self, node: str) -> set[str]:
        """Domains with a claim allocated on ``node``: who holds it is theirs to decide anew."""
        return {a.domain_uid for a in self.allocations(node=node)}

    def _nodes_relisted(self) -> None:
        seen = {str(n["metadata"].get("name")): _membership(n) for n in self.nodes.items()}
        with self._lock:
            self._membership = seen
        self._on_relist()

    def _claim_changed(self, kind: str, claim: dict[str, Any]) -> None:
        uid = str(claim["metadata"].get("uid", ""))
        if placement.asks_for_a_channel(claim):
            self._on_placement()
            if kind != "DELETED":
                self._on_claim(claim)
        allocation = None if kind == "DELETED" else placement.parse_claim(claim)
        now = _placement_key(allocation)
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

    def _claims_relisted(self) -> None:
        # Foreign claims too, as _claim_changed tracks them: the binder must answer (refuse)
        # those waiting after a relist as well.
        every = [*self.allocations(), *self.allocations(foreign=True)]
        placed = {a.uid: _placement_key(a) for a in every}
        with self._lock:
            self._placed = placed
        for node in {key[1] for key in placed.values()}:
            self._on_node(node)
        self._on_relist()

    def _agent_changed(self, kind: str, pod: dict[str, Any]) -> None:
        name = str(pod.get("spec", {}).get("nodeName", ""))
        with self._lock:
            current = self._membership.get(name, ("", ""))[0]
        for uid in {current, *self._listing_domains(name)}:
            self._key(uid)

    def _listing_domains(self, node: str) -> set[str]:
        """Domains whose cliques list ``node``."""
        return {_label(c) for c in self.cliques.by_index("node", node)}

    # -- reads ----------------------------------------------------------------------------

    def forget_writes(self) -> None:
        """Forget this replica's own writes (a new leadership term: others wrote since)."""
        self.written_domains.clear()
        self.written_cliques.clear()

    def domain_uids(self) -> list[str]:
        """Every known ComputeDomain."""
        return [str(d["metadata"]["uid"]) for d in self.domains.items()]

    def domain(self, uid: str) -> dict[str, Any] | None:
        """The raw ComputeDomain ``uid``, our latest write of it included."""
        cached = self.domains.by_uid(uid)
        overlaid = self.written_domains.overlay([cached] if cached is not None else [])
        return overlaid[0] if overlaid and cached is not None else None

    def cliques_of(self, uid: str) -> dict[CliqueID, dict[str, Any]]:
        """The clique objects of domain ``uid`` by clique ID, our latest writes included."""
        return {
            CliqueID(_label(c, constants.CLIQUE_ID_LABEL)): c
            for c in self.written_cliques.overlay(self.cliques.by_index("domain", uid))
            if _label(c) == uid
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
        domain = self.domains.by_uid(domain_uid)
        return None if domain is None else str(domain["metadata"].get("namespace", ""))

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
            with self._lock:
                known = self._namespaces.get(domain_uid)
        return known is None or known == namespace

    def placement_activity(self) -> tuple[dict[str, turns.Activity], frozenset[str]]:
        """What the turn decides from (``turns``): live domains' activity, gone ones waiting.

        Per live domain, its claims waiting for a node and those allocated one; and the gone
        (or deleting) domains that still have a claim waiting.

        A waiting channel claim whose config names no readable domain (or one of another
        namespace, :meth:`counts`) counts as a domain of its own that cannot use any turn.
        Only the turn keeper calls this (one thread).
        """
        live = {
            str(d["metadata"]["uid"])
            for d in self.domains.items()
            if not d["metadata"].get("deletionTimestamp")
        }
        seen: list[turns.ClaimState] = []
        landed: dict[str, tuple[str, str]] = {}
        for claim in self.claims.items():
            if claim["metadata"].get("deletionTimestamp"):
                continue
            allocation = placement.parse_claim(claim)
            if allocation is None:
                if not placement.asks_for_a_channel(claim):
                    continue
                claim_uid = str(claim["metadata"].get("uid", ""))
                if claim_uid in self._landed and _generated(claim):
                    # Deallocated once its pod ended, on its way to deletion: waits for nothing.
                    landed[claim_uid] = self._landed[claim_uid]
                    continue
                uid = placement.domain_of(claim)
                if not self.counts(uid, str(claim["metadata"].get("namespace", ""))):
                    uid = ""  # another namespace's domain: to this claim, none exists
                if not uid:
                    # Its config names no domain it could read (the plugin refuses it at
                    # prepare, saying why): it needs free nodes open, so it counts as a placer
                    # of its own that no turn fits.
                    uid = f"claim/{claim_uid}"
                    live.add(uid)
                tolerant = placement.tolerates_own_hold(claim, uid)
                seen.append(turns.ClaimState(uid, allocated=False, waiting=True, tolerant=tolerant))
            elif not allocation.refused and self.counts(
                allocation.domain_uid, allocation.namespace
            ):
                # A node it took counts as waiting until the record (or its copy, the label,
                # for a node without a clique) names it for the domain: until then its plugin
                # may still show it free. Once so named the allocation has landed: its pod
                # ending, which takes the node out of the record, is no placement.
                where = (allocation.node, allocation.allocated_at)
                if self._landed.get(allocation.uid) == where or allocation.domain_uid in (
                    self.recorded(allocation.node),
                    self.node_label(allocation.node),
                ):
                    landed[allocation.uid] = where
                waiting = allocation.pending or allocation.uid not in landed
                seen.append(
                    turns.ClaimState(allocation.domain_uid, allocated=True, waiting=waiting)
                )
        self._landed = landed
        found = turns.activity(seen)
        gone_waiting = frozenset(uid for uid, a in found.items() if uid not in live and a.waiting)
        return {uid: found.get(uid, turns.Activity(0, 0)) for uid in live}, gone_waiting

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
        naming = {_label(c): c for c in overlaid if node in _named_nodes(c)}
        return placement.recorded_holder(node, naming)

    def node_label(self, name: str) -> str:
        """The computeDomain label of node ``name`` as last seen ("" absent or unknown)."""
        with self._lock:
            return self._membership.get(name, ("", ""))[0]

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
