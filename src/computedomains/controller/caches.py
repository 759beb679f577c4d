"""The controller's view of the cluster: one informer per resource, snapshots, change keys.

Every change is mapped to the ComputeDomains it concerns (their UIDs are the work-queue
keys): a node to the domain in its label now and the one it had before (and to none when
neither its domain nor its clique label changed: node heartbeats cost nothing); an agent pod
to the domain of its node and to every domain whose cliques list that node; a clique or
template to the domain in its label.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

from computedomains.api import constants, models
from computedomains.api.schema import ValidationError
from computedomains.controller import objects
from computedomains.controller.views import (
    CliqueID,
    Domain,
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
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp", "labels")  # fmt: skip
    return {
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"nodeName": pod.get("spec", {}).get("nodeName", "")},
        "status": {k: status[k] for k in ("podIP", "conditions") if k in status},
    }


def _label(obj: dict[str, Any], key: str = constants.COMPUTE_DOMAIN_LABEL) -> str:
    return str((obj.get("metadata", {}).get("labels") or {}).get(key, ""))


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
        self._lock = threading.Lock()
        self._membership: dict[str, tuple[str, str]] = {}
        """(domain, clique) label values last seen per node: a removed label still names
        its old domain, and a change of neither is no news."""
        self.written_domains = writes.MutationCache()
        self.written_cliques = writes.MutationCache()
        self.domains = Informer(api, path=objects.DOMAINS, on_relist=on_relist,
                                on_change=lambda _, o: self._key(o["metadata"]["uid"]))  # fmt: skip
        self._on_relist = on_relist
        self.nodes = Informer(
            api, path=objects.NODES, transform=_trim_node, on_change=self._node_changed,
            on_relist=self._nodes_relisted,
        )  # fmt: skip
        self.cliques = Informer(
            api, path=objects.cliques_path(namespace),
            label_selector=constants.COMPUTE_DOMAIN_LABEL,
            on_change=lambda _, o: self._key(_label(o)), on_relist=on_relist,
        )  # fmt: skip
        self.agents = Informer(
            api, path=objects.agents_path(namespace), label_selector=objects.AGENT_SELECTOR,
            transform=_trim_pod, on_change=self._agent_changed, on_relist=on_relist,
        )  # fmt: skip
        self.templates = Informer(
            api, path=objects.TEMPLATES, label_selector=objects.TEMPLATE_SELECTOR,
            on_change=lambda _, o: self._key(_label(o)), on_relist=on_relist,
        )  # fmt: skip
        self._all = (self.domains, self.nodes, self.cliques, self.agents, self.templates)

    # -- lifecycle ------------------------------------------------------------------------

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

    def _node_changed(self, kind: str, node: dict[str, Any]) -> None:
        name = str(node["metadata"].get("name", ""))
        now = ("", "") if kind == "DELETED" else _membership(node)
        with self._lock:
            before = self._membership.pop(name, ("", ""))
            if kind != "DELETED":
                self._membership[name] = now
        if kind == "MODIFIED" and now == before:
            return  # a heartbeat or another label: nothing the controller decides on
        for uid in {before[0], now[0], *self._listing_domains(name)}:
            self._key(uid)

    def _nodes_relisted(self) -> None:
        seen = {str(n["metadata"].get("name")): _membership(n) for n in self.nodes.items()}
        with self._lock:
            self._membership = seen
        self._on_relist()

    def _agent_changed(self, kind: str, pod: dict[str, Any]) -> None:
        name = str(pod.get("spec", {}).get("nodeName", ""))
        with self._lock:
            current = self._membership.get(name, ("", ""))[0]
        for uid in {current, *self._listing_domains(name)}:
            self._key(uid)

    def _listing_domains(self, node: str) -> set[str]:
        """Domains whose cliques list ``node``."""
        return {
            _label(c)
            for c in self.cliques.items()
            if any(d.get("nodeName") == node for d in c.get("daemons") or [])
        }

    # -- reads ----------------------------------------------------------------------------

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
            for c in self.written_cliques.overlay(self.cliques.items())
            if _label(c) == uid
        }

    def template_present(self, domain: Domain) -> bool:
        """Our workload template of ``domain`` is in the cache."""
        return any(
            t["metadata"].get("namespace") == domain.namespace
            and t["metadata"].get("name") == domain.template
            and _label(t) == domain.uid
            for t in self.templates.items()
        )

    def snapshot(self, raw: dict[str, Any]) -> Snapshot:
        """Everything a reconcile of the ComputeDomain ``raw`` decides on."""
        domain = Domain.parse(raw)
        cliques: dict[CliqueID, tuple[models.CliqueDaemon, ...]] = {}
        for clique, obj in self.cliques_of(domain.uid).items():
            try:
                cliques[clique] = models.ComputeDomainClique.from_dict(obj, strict=False).daemons
            except ValidationError:
                cliques[clique] = ()  # unreadable: rewritten from scratch (slots reassigned)
        listed = {d.node_name for ds in cliques.values() for d in ds}
        nodes: dict[NodeName, NodeInfo] = {}
        for node in self.nodes.items():
            info = NodeInfo.parse(cast(wire.Node, node))
            if info.domain == domain.uid or info.name in listed:
                nodes[info.name] = info
        pods = [cast(wire.Pod, p) for p in self.agents.items()]
        agents = {n: agent_of(p) for n, p in pick_agent_pods(pods).items() if n in nodes}
        return Snapshot(
            domain=domain,
            nodes=nodes,
            agents=agents,
            cliques=cliques,
            template_present=self.template_present(domain),
        )
