"""A ComputeDomain's status, aggregated from its members (the controller is its only writer).

``nodes[]`` has one entry per member, as the incumbent's: name, the agent pod's IP, clique,
slot, readiness. A member that overflowed its clique is listed without a slot and NotReady,
so the domain shows why it is not Ready. A member without a clique (no NVLink fabric) has
``cliqueID: ""`` and slot -1, and is Ready: it has no IMEX to form. Nodes that left but still
hold a slot are not members and not listed. ``status`` is Ready when every listed node is
Ready and there are at least ``spec.numNodes`` of them, as the incumbent computes it.
"""

from __future__ import annotations

from computedomains.api import models
from computedomains.controller.membership import CliquesPlan
from computedomains.controller.views import Snapshot

NO_SLOT = -1
"""The ``index`` of a member without a fabric (the incumbent's value)."""


def _order(node: models.ComputeDomainNode) -> tuple[str, int, str]:
    index = node.index if node.index is not None else 1 << 30
    return (node.clique_id, index, node.name)


def aggregate(snapshot: Snapshot, cliques: CliquesPlan) -> models.ComputeDomainStatus:
    """The status the domain should show now."""
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
    ready_count = sum(1 for n in nodes if n.status is models.Status.READY)
    total = max(len(nodes), snapshot.domain.num_nodes)
    overall = models.Status.READY if ready_count == total else models.Status.NOT_READY
    return models.ComputeDomainStatus(
        status=overall, nodes=tuple(nodes), nodes_ready=f"{ready_count}/{total}"
    )


def differs(
    current: models.ComputeDomainStatus | None, desired: models.ComputeDomainStatus
) -> bool:
    """True when writing ``desired`` would change what the object shows."""
    if current is None:
        return True
    return (
        current.status != desired.status
        or current.nodes_ready != desired.nodes_ready
        or sorted(current.nodes, key=_order) != sorted(desired.nodes, key=_order)
    )
