"""Build controller snapshots in a line each, for the decide tables."""

from __future__ import annotations

from collections.abc import Sequence

from computedomains.api import constants, imex, models
from computedomains.api.domainview import Domain, DomainUID
from computedomains.controller.views import (
    Agent,
    Claim,
    CliqueID,
    NodeInfo,
    NodeName,
    Snapshot,
)

UID = DomainUID("uid-1")
C1 = CliqueID("rack-1.32766")
C2 = CliqueID("rack-2.32766")
NOW = "2025-01-01T00:00:00Z"
"""The time of every snapshot (condition transitions)."""


def domain(
    *, deleting: bool = False, finalized: bool = True, num_nodes: int = 0,
    status: models.ComputeDomainStatusV1Beta2 | None = None,
    clique: models.CliquePlacement = models.CliquePlacement.NONE,
) -> Domain:  # fmt: skip
    return Domain(
        uid=UID, name="cd", namespace="ns", template="cd-channel",
        allocation_mode=models.AllocationMode.SINGLE, num_nodes=num_nodes, deleting=deleting,
        finalizers=(constants.FINALIZER,) if finalized else (), status=status, clique=clique,
    )  # fmt: skip


def node(name: str, *, domain: str = UID, clique: str = C1, claim: Claim | None = None) -> NodeInfo:
    """A node; by default a member (the domain holds it with a claim there) and labelled so.

    Labelled for another domain, or not at all, it is by default no member (it left).
    """
    if claim is None:
        claim = Claim.HELD if domain == UID else Claim.NONE
    return NodeInfo(name=NodeName(name), domain=domain, clique=clique, claim=claim)


def agent(name: str, reason: str = imex.Reason.READY, *, domain: str = UID, ip: str = "") -> Agent:
    return Agent(
        node=NodeName(name), ip=ip or f"10.0.0.{sum(map(ord, name)) % 250}", domain=domain,
        reason=reason, ready=reason == imex.Reason.READY, detail="",
    )  # fmt: skip


def daemon(
    name: str, index: int | None, *, ready: bool = False, clique: str = C1, ip: str = ""
) -> models.CliqueDaemon:
    return models.CliqueDaemon(
        node_name=name, ip_address=ip, clique_id=clique, index=index,
        status=models.Status.READY if ready else models.Status.NOT_READY,
    )  # fmt: skip


def snapshot(
    *,
    nodes: Sequence[NodeInfo] = (),
    agents: Sequence[Agent] = (),
    cliques: dict[CliqueID, tuple[models.CliqueDaemon, ...]] | None = None,
    dom: Domain | None = None,
    template: bool = True,
) -> Snapshot:
    """A snapshot; each clique object names the members it lists, as the controller wrote it."""
    d = dom or domain()
    members = {n.name for n in nodes if n.member}
    return Snapshot(
        domain=d,
        nodes={n.name: n for n in nodes},
        agents={a.node: a for a in agents},
        cliques=cliques or {},
        clique_members={
            c: frozenset(x.node_name for x in ds if x.node_name in members)
            for c, ds in (cliques or {}).items()
        },
        template_present=template,
        now=NOW,
    )
