"""The line the controller logs at ``-v 1`` for each of its decisions: what, and from what.

``computedomains.logs`` promises that verbosity 1 shows each decision's inputs. The decide
functions stay pure: the act step that has a decision's inputs and its outcome logs this line,
at DEBUG. Each line is short whatever the domain's size: the domain's key and UID, the node,
counts, and only the nodes the decision changes something for (at most
:data:`eventplan.listing`'s screenful), never whole objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from computedomains.api import placement
from computedomains.api.models import ComputeDomainStatusV1Beta2, Status
from computedomains.controller import conditions, eventplan, freenodes, membership, status
from computedomains.controller.views import CliqueID, NodeName, Snapshot


def _nodes(names: Iterable[str]) -> str:
    return eventplan.listing(names) or "-"


def _slots(slots: Mapping[NodeName, int]) -> str:
    return _nodes(f"{n}={i}" for n, i in sorted(slots.items(), key=lambda item: item[1]))


def _domain(snapshot: Snapshot) -> str:
    return f"domain {snapshot.domain.key} ({snapshot.domain.uid})"


def free_node(
    *,
    node: str,
    recorded: str,
    holder: str,
    allocations: Sequence[placement.ChannelAllocation],
    foreign: Sequence[placement.ChannelAllocation],
    answers: Sequence[freenodes.Answer],
    held_for: float,
) -> str:
    """The binder's answers on ``node`` (:func:`freenodes.decide`) and what they came from.

    ``held_for``: seconds the answers wait because a turn just ended (0: written now).
    """
    each = "; ".join(
        f"claim {a.allocation.namespace}/{a.allocation.name} of "
        f"{a.allocation.domain_uid or '-'} {'granted' if a.granted else 'refused'} ({a.reason})"
        for a in answers
    )
    held = f"; held back {held_for:.1f}s (a turn just ended)" if held_for > 0 else ""
    return (
        f"node {node}: free-node answers from record {recorded or '-'}, holder "
        f"{holder or '-'}, {len(allocations)} allocation(s), {len(foreign)} foreign: {each}{held}"
    )


def membership_plan(
    snapshot: Snapshot,
    plan: membership.CliquesPlan,
    *,
    limit: int,
    writes: Iterable[CliqueID],
) -> str:
    """The slots and cliques of :func:`membership.plan`, from the members and stored slots."""
    stored = sum(len(daemons) for daemons in snapshot.cliques.values())
    held = sum(len(result.slots) for result in plan.slots.values())
    changes = "".join(
        f"; {clique}: assigned {_slots(r.assigned)}, freed {_slots(r.freed)}, "
        f"overflow {_nodes(r.overflow)}"
        for clique, r in sorted(plan.slots.items())
        if r.assigned or r.freed or r.overflow
    )
    return (
        f"{_domain(snapshot)}: membership from {len(snapshot.members())} member(s), "
        f"{stored} stored slot(s), limit {limit}: {held} slot(s) in {len(plan.slots)} "
        f"clique(s), no fabric {_nodes(plan.no_fabric)}{changes}; clique writes "
        f"{_nodes(sorted(writes))}"
    )


def status_decision(
    snapshot: Snapshot,
    desired: ComputeDomainStatusV1Beta2,
    *,
    written: bool,
    released: bool,
) -> str:
    """The status :func:`status.aggregate` made, from what, and whether it is written now."""
    stored = snapshot.domain.status
    ready = next((c for c in desired.conditions if c.type == conditions.Type.READY), None)
    verdict = f"Ready={ready.status} ({ready.reason})" if ready is not None else "no Ready"
    if written:
        outcome = "written"
    elif released:
        outcome = "not written (released)"
    elif status.differs(stored, status.shown(desired)):
        outcome = "held back until the next status write"
    else:
        outcome = "unchanged"
    members = len(desired.nodes)
    ready_count = sum(1 for n in desired.nodes if n.status is Status.READY)
    was = f"{stored.status} {stored.nodes_ready or '-'}" if stored is not None else "none"
    return (
        f"{_domain(snapshot)}: status {desired.status} {desired.nodes_ready or '-'}, {verdict}, "
        f"from "
        f"{members} member(s) ({ready_count} ready), numNodes {snapshot.domain.num_nodes}, "
        f"stored {was}: {outcome}"
    )
