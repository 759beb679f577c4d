"""What the controller decides on: typed, immutable views parsed from raw API objects.

A reconcile reads one :class:`Snapshot` per ComputeDomain from the caches; everything
downstream (slots, cliques, status, Events) is computed from it without I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, NewType

from computedomains.api import constants, models
from computedomains.api.schema import ValidationError
from computedomains.kube import wire

DomainUID = NewType("DomainUID", str)
NodeName = NewType("NodeName", str)
CliqueID = NewType("CliqueID", str)
"""``<clusterUUID>.<cliqueId>``, the value of the node's clique label."""

_PREFIX = "domain "


class AgentReason(enum.StrEnum):
    """The ``reason`` of the agent's IMEXReady condition (control-side.md)."""

    READY = "Ready"
    STARTING = "Starting"
    FAILED = "Failed"
    STOPPED = "Stopped"
    IDLE = "Idle"


@dataclasses.dataclass(frozen=True)
class Domain:
    """A ComputeDomain, as far as the controller acts on it."""

    uid: DomainUID
    name: str
    namespace: str
    template: str
    """Name of the workload ResourceClaimTemplate; empty when the object has no spec."""
    allocation_mode: models.AllocationMode
    num_nodes: int
    deleting: bool
    finalized: bool
    """Our finalizer is on the object."""
    status: models.ComputeDomainStatus | None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Domain:
        """The view of a raw ComputeDomain; fields it cannot parse count as absent."""
        meta = raw.get("metadata", {})
        try:
            model = models.ComputeDomain.from_dict(raw, strict=False)
        except ValidationError:
            # The CRD validates every write, so this is an object from a future version:
            # act on its metadata only.
            model = models.ComputeDomain(metadata=meta)
        spec = model.spec
        return cls(
            uid=DomainUID(str(meta.get("uid", ""))),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            template=spec.channel.resource_claim_template.name if spec else "",
            allocation_mode=spec.channel.allocation_mode if spec else models.AllocationMode.SINGLE,
            num_nodes=spec.num_nodes if spec else 0,
            deleting=bool(meta.get("deletionTimestamp")),
            finalized=constants.FINALIZER in (meta.get("finalizers") or []),
            status=model.status,
        )


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """A node's membership facts: which domain it is in, which clique it belongs to."""

    name: NodeName
    domain: str
    """Value of the computeDomain label ("" when absent)."""
    clique: str
    """Value of the clique label ("" when absent: no fabric, or not classified yet)."""

    @classmethod
    def parse(cls, node: wire.Node) -> NodeInfo:
        """The view of a Node."""
        meta = node.get("metadata", {})
        labels = meta.get("labels") or {}
        return cls(
            name=NodeName(meta.get("name", "")),
            domain=labels.get(constants.COMPUTE_DOMAIN_LABEL, ""),
            clique=labels.get(constants.CLIQUE_LABEL, ""),
        )


@dataclasses.dataclass(frozen=True)
class Agent:
    """The IMEX agent on one node: its pod IP and what its IMEXReady condition says."""

    node: NodeName
    ip: str
    domain: str
    """The domain the condition speaks of ("" when idle or not reported yet)."""
    reason: str
    """The condition's reason ("" before the agent reported anything)."""
    ready: bool
    detail: str
    """IMEX's own text, after the ``domain <uid>: `` prefix."""

    def ready_for(self, uid: str) -> bool:
        """IMEX answers READY for domain ``uid``."""
        return self.ready and self.domain == uid

    def released(self, uid: str) -> bool:
        """The agent no longer serves ``uid``: stopped it, idles, or serves another domain."""
        return self.domain != uid or self.reason in (AgentReason.STOPPED, AgentReason.IDLE)

    def failed_for(self, uid: str) -> bool:
        """IMEX failed for ``uid`` (the detail carries its error)."""
        return self.domain == uid and self.reason == AgentReason.FAILED


def parse_condition_message(message: str) -> tuple[str, str]:
    """(domain uid, IMEX's text) of an IMEXReady message; ("", message) without the prefix."""
    if not message.startswith(_PREFIX):
        return "", message
    uid, _, detail = message[len(_PREFIX) :].partition(":")
    return uid.strip(), detail.strip()


def agent_of(pod: wire.Pod) -> Agent:
    """The agent view of an IMEX agent pod."""
    status = pod.get("status", {})
    condition = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == constants.IMEX_READY_CONDITION
        ),
        None,
    )
    domain, detail, reason, ready = "", "", "", False
    if condition is not None:
        domain, detail = parse_condition_message(condition.get("message", ""))
        reason = condition.get("reason", "")
        ready = condition.get("status") == "True"
    return Agent(
        node=NodeName(pod.get("spec", {}).get("nodeName", "")),
        ip=status.get("podIP", ""),
        domain=domain,
        reason=reason,
        ready=ready,
        detail=detail,
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
    template_present: bool
    """Our workload ResourceClaimTemplate exists."""

    def members(self) -> list[NodeInfo]:
        """Nodes in the domain now (they carry its label), by name."""
        return sorted(
            (n for n in self.nodes.values() if n.domain == self.domain.uid), key=lambda n: n.name
        )
