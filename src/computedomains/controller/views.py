"""What the controller decides on: typed, immutable views parsed from raw API objects.

A reconcile reads one :class:`Snapshot` per ComputeDomain from the caches; everything
downstream (slots, cliques, status, Events) is computed from it without I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import NewType

from computedomains.api import constants, imex, models
from computedomains.api.domainview import Domain
from computedomains.kube import wire

NodeName = NewType("NodeName", str)
CliqueID = NewType("CliqueID", str)
"""``<clusterUUID>.<cliqueId>``, the value of the node's clique label."""


class Claim(enum.Enum):
    """What the snapshot's domain has allocated on a node (``api/placement.py``)."""

    NONE = "none"
    """No claim of the domain is allocated there (or every one was refused the node)."""
    ALLOCATED = "allocated"
    """A claim is allocated there, but another domain holds the node (a race lost, its pod
    stranded until the binder moves it)."""
    HELD = "held"
    """A claim is allocated there and the domain holds the node (``placement.holder``): the
    record names the domain, or, with no record, the binder granted it or a claim of the
    domain took it without binding conditions first. The node is a member from then on, so the
    domain starts forming while the scheduler still waits in PreBind."""


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """A node's membership facts: the domain's claim on it, its clique, its domain label."""

    name: NodeName
    domain: str
    """Value of the computeDomain label ("" when absent): the controller's copy of the record,
    an output, never what membership is decided from."""
    clique: str
    """Value of the clique label ("" when absent: no fabric, or not classified yet)."""
    claim: Claim = Claim.NONE
    """The snapshot's domain's claim on the node."""
    resource_version: str = ""
    """The Node's resourceVersion as cached (the precondition of a label write)."""

    @classmethod
    def parse(cls, node: wire.Node) -> NodeInfo:
        """The view of a Node (its claims are added by the snapshot)."""
        meta = node.get("metadata", {})
        labels = meta.get("labels") or {}
        return cls(
            name=NodeName(meta.get("name", "")),
            domain=labels.get(constants.COMPUTE_DOMAIN_LABEL, ""),
            clique=labels.get(constants.CLIQUE_LABEL, ""),
            resource_version=meta.get("resourceVersion", ""),
        )

    @property
    def member(self) -> bool:
        """In the snapshot's domain: it holds the node with a claim allocated there.

        The label plays no part: a forged one admits nothing, a removed one costs nothing.
        """
        return self.claim is Claim.HELD


@dataclasses.dataclass(frozen=True)
class Agent:
    """The IMEX agent on one node: its pod IP and what its pod reports (``api/imex.py``)."""

    node: NodeName
    ip: str
    domain: str
    """The domain the report speaks of ("" when idle or not reported yet)."""
    reason: str
    """The condition's reason ("" before the agent reported anything)."""
    ready: bool
    """IMEX answers READY, said by the run of the agent container that is running now: a
    report from before a crash, or while the container is down, is not believed."""
    detail: str
    """The condition's message, for Events."""
    legacy: bool = False
    """An agent from before the domain annotation (``api/imex.py``): ``domain`` is the node's
    label, the domain such an agent follows, not one it reported."""

    def ready_for(self, uid: str) -> bool:
        """IMEX answers READY for domain ``uid``."""
        return self.ready and self.domain == uid

    def released(self, uid: str) -> bool:
        """The agent no longer serves ``uid``: stopped it, idles, or serves another domain.

        A legacy agent never said which domain it serves: only its own ``Stopped`` or
        ``Idle`` releases a slot (safe; a slot it left for another domain waits until then).
        """
        stopped = self.reason in (imex.Reason.STOPPED, imex.Reason.IDLE)
        return stopped if self.legacy else self.domain != uid or stopped

    def failed_for(self, uid: str) -> bool:
        """IMEX failed for ``uid`` (the detail carries its error)."""
        return self.domain == uid and self.reason == imex.Reason.FAILED


def agent_of(pod: wire.Pod, *, node_domain: str = "") -> Agent:
    """The agent view of an IMEX agent pod; ``node_domain`` is its node's domain label."""
    report = imex.pod_report(pod)
    node = NodeName(pod.get("spec", {}).get("nodeName", ""))
    ip = pod.get("status", {}).get("podIP", "")
    if report is None:
        return Agent(node=node, ip=ip, domain="", reason="", ready=False, detail="")
    idle = report.reason in (imex.Reason.STOPPED, imex.Reason.IDLE)
    return Agent(
        node=node,
        ip=ip,
        domain=("" if idle else node_domain) if report.legacy else report.domain_uid,
        reason=report.reason,
        ready=report.ready and imex.current(report, since=imex.running_since(pod)),
        detail=report.message,
        legacy=report.legacy,
    )


def pick_agent_pods(pods: list[wire.Pod]) -> dict[NodeName, wire.Pod]:
    """The agent pod that speaks for each node: live before terminating, then the newest."""

    def rank(pod: wire.Pod) -> tuple[bool, str]:
        meta = pod.get("metadata", {})
        return (not meta.get("deletionTimestamp"), meta.get("creationTimestamp", ""))

    chosen: dict[NodeName, wire.Pod] = {}
    for pod in pods:
        node = NodeName(pod.get("spec", {}).get("nodeName", ""))
        if node and (node not in chosen or rank(pod) > rank(chosen[node])):
            chosen[node] = pod
    return chosen


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything one reconcile of one ComputeDomain decides on."""

    domain: Domain
    nodes: Mapping[NodeName, NodeInfo]
    """Nodes that carry the domain's label or sit in one of its cliques; absent = deleted."""
    agents: Mapping[NodeName, Agent]
    """Agents on those nodes; absent = no agent pod there."""
    cliques: Mapping[CliqueID, tuple[models.CliqueDaemon, ...]]
    """Daemons of the domain's existing clique objects."""
    clique_members: Mapping[CliqueID, frozenset[str] | None]
    """The members each existing clique object names (None: it names none)."""
    template_present: bool
    """Our workload ResourceClaimTemplate exists."""
    now: str
    """When the snapshot was taken (RFC 3339, UTC): the time of condition transitions."""
    template_outdated: bool = False
    """It exists but predates placement (``objects.template_current``): it is replaced."""

    def members(self) -> list[NodeInfo]:
        """Nodes in the domain now (:attr:`NodeInfo.member`), by name."""
        return sorted((n for n in self.nodes.values() if n.member), key=lambda n: n.name)

    def unclaimed_labels(self) -> list[NodeName]:
        """Nodes labelled for the domain with no claim of it and no slot: a forged label."""
        uid = self.domain.uid
        listed = {d.node_name for ds in self.cliques.values() for d in ds}
        return sorted(
            n.name
            for n in self.nodes.values()
            if n.domain == uid and n.claim is Claim.NONE and n.name not in listed
        )
