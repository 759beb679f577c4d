"""A ComputeDomain's status, aggregated from its members (the controller is its only writer).

``nodes[]`` has one entry per member, as the incumbent's: name, the agent pod's IP, clique,
slot, readiness. A member that overflowed its clique is listed without a slot and NotReady,
so the domain shows why it is not Ready. A member without a clique (no NVLink fabric) has
``cliqueID: ""`` and slot -1, and is Ready: it has no IMEX to form. Nodes that left but still
hold a slot are not members and not listed. ``status`` is Ready when the Ready condition is
True (:mod:`conditions`): every listed node is Ready, there are at least ``numNodes`` of them
(as the incumbent computes it) and at least one (unlike the incumbent, which calls a domain
nobody joined Ready). ``cliques`` sums up members and ready members per clique.

The stored ``nodes[]`` lists at most :data:`NODES_LISTED` members, those not Ready first
(:func:`shown`): one object the controller rewrites as members change must not grow with the
job (a 1,000-node domain's full list is over 100 KiB). The counts, the conditions and
``cliques`` cover every member; the ComputeDomainClique objects list every daemon. What the
conditions and Events compare with is the full list of the last status written
(:func:`previous`), which the controller that wrote it remembers.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from computedomains.api import models
from computedomains.controller import conditions
from computedomains.controller.membership import CliquesPlan
from computedomains.controller.views import Snapshot

NO_SLOT = -1
"""The ``index`` of a member without a fabric (the incumbent's value)."""
NODES_LISTED = 256
"""The most members ``status.nodes`` lists (about 30 KiB): a 1,024-GPU domain in full."""


def _order(node: models.ComputeDomainNode) -> tuple[str, int, str]:
    index = node.index if node.index is not None else 1 << 30
    return (node.clique_id, index, node.name)


def aggregate(
    snapshot: Snapshot,
    cliques: CliquesPlan,
    *,
    remembered: tuple[models.ComputeDomainNode, ...] | None = None,
) -> models.ComputeDomainStatusV1Beta2:
    """The status the domain should show now, every member in ``nodes`` (see :func:`shown`).

    ``remembered`` is the full member list of the last status written (:func:`previous`).
    """
    uid = snapshot.domain.uid
    nodes: list[models.ComputeDomainNode] = []
    for member in snapshot.members():
        agent = snapshot.agents.get(member.name)
        ip = agent.ip if agent is not None else ""
        clique = cliques.clique_of.get(member.name)
        if clique is None:
            nodes.append(
                models.ComputeDomainNode(
                    name=member.name, ip_address=ip, clique_id="", index=NO_SLOT,
                    status=models.Status.READY,
                )
            )  # fmt: skip
            continue
        index = cliques.slots[clique].slots.get(member.name)
        ready = index is not None and agent is not None and agent.ready_for(uid)
        nodes.append(
            models.ComputeDomainNode(
                name=member.name, ip_address=ip, clique_id=clique, index=index,
                status=models.Status.READY if ready else models.Status.NOT_READY,
            )
        )  # fmt: skip
    nodes.sort(key=_order)
    domain = snapshot.domain
    ready_count = sum(1 for n in nodes if n.status is models.Status.READY)
    total = max(len(nodes), domain.num_nodes)
    before = previous(domain.status, nodes, remembered=remembered)
    computed = conditions.compute(
        nodes, num_nodes=domain.num_nodes, placement=domain.clique, generation=domain.generation,
        previous=before, existing_nodes=snapshot.nodes.keys(), now=snapshot.now,
    )  # fmt: skip
    verdict = next(c for c in computed if c.type == conditions.Type.READY)
    return models.ComputeDomainStatusV1Beta2(
        status=models.Status.READY
        if verdict.status is models.ConditionStatus.TRUE
        else models.Status.NOT_READY,
        nodes=tuple(nodes),
        nodes_ready=f"{ready_count}/{total}",
        conditions=computed,
        cliques=_cliques(nodes),
    )


def shown(desired: models.ComputeDomainStatusV1Beta2) -> models.ComputeDomainStatusV1Beta2:
    """``desired`` as it is written: its ``nodes`` cut to :func:`listed`."""
    return dataclasses.replace(desired, nodes=listed(list(desired.nodes)))


def previous(
    stored: models.ComputeDomainStatusV1Beta2 | None,
    members: Sequence[models.ComputeDomainNode],
    *,
    remembered: tuple[models.ComputeDomainNode, ...] | None,
) -> models.ComputeDomainStatusV1Beta2 | None:
    """The stored status with every member it was written for.

    ``remembered`` (the full list this controller wrote last) counts when the stored list is
    still the one it made. Without it (another replica wrote last, or this one restarted) a
    stored list cut to :data:`NODES_LISTED` is completed with the ``members`` of now that it
    left out, taken as unchanged: nothing is announced from what the object cannot tell.
    """
    if stored is None:
        return None
    if remembered is not None and listed(list(remembered)) == stored.nodes:
        return dataclasses.replace(stored, nodes=remembered)
    if len(stored.nodes) < NODES_LISTED:
        return stored
    names = {n.name for n in stored.nodes}
    unlisted = tuple(n for n in members if n.name not in names)
    return dataclasses.replace(stored, nodes=tuple(sorted(stored.nodes + unlisted, key=_order)))


def listed(nodes: list[models.ComputeDomainNode]) -> tuple[models.ComputeDomainNode, ...]:
    """The members ``status.nodes`` shows, in order: all, or :data:`NODES_LISTED` of them.

    Those not Ready come first: they are what someone looking at a stuck domain needs.
    """
    if len(nodes) <= NODES_LISTED:
        return tuple(nodes)
    waiting = [n for n in nodes if n.status is not models.Status.READY]
    ready = [n for n in nodes if n.status is models.Status.READY]
    return tuple(sorted((waiting + ready)[:NODES_LISTED], key=_order))


def _cliques(nodes: list[models.ComputeDomainNode]) -> tuple[models.CliqueSummary, ...]:
    """Members and ready members per clique; members without a fabric are in no clique."""
    members = Counter(n.clique_id for n in nodes if n.clique_id)
    ready = Counter(n.clique_id for n in nodes if n.clique_id and n.status is models.Status.READY)
    return tuple(
        models.CliqueSummary(id=c, nodes=members[c], ready_nodes=ready[c]) for c in sorted(members)
    )


def differs(
    current: models.ComputeDomainStatusV1Beta2 | None,
    desired: models.ComputeDomainStatusV1Beta2,
) -> bool:
    """True when writing ``desired`` would change what the object shows."""
    if current is None:
        return True

    def by_type(status: models.ComputeDomainStatusV1Beta2) -> list[models.Condition]:
        return sorted(status.conditions, key=lambda c: c.type)

    return (
        current.status != desired.status
        or current.nodes_ready != desired.nodes_ready
        or sorted(current.nodes, key=_order) != sorted(desired.nodes, key=_order)
        or by_type(current) != by_type(desired)
        or sorted(current.cliques, key=lambda c: c.id) != list(desired.cliques)
    )
