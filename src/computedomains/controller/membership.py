"""Which node is in which clique of a domain, and what each clique object should list.

Membership is the controller's own decision (``views.NodeInfo.member``): the domain holds the
node with a claim allocated there. Node-init's clique label says where. What this plans is the
record every other component reads: each clique object names its members
(``CLIQUE_MEMBERS_ANNOTATION``) beside their slots. A member whose clique label vanished (a
fabric re-check in progress) stays where its slot is rather than losing it; a member with no
clique label and no slot has no NVLink fabric and needs no IMEX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from computedomains.api import models
from computedomains.controller import frozencliques, slots
from computedomains.controller.views import CliqueID, NodeName, Snapshot


@dataclasses.dataclass(frozen=True)
class CliquesPlan:
    """Slots and clique contents of one domain after one round."""

    slots: Mapping[CliqueID, slots.SlotPlan]
    daemons: Mapping[CliqueID, tuple[models.CliqueDaemon, ...]]
    """What each clique object should list (empty: the object should not exist)."""
    no_fabric: tuple[NodeName, ...]
    """Members without a clique: in the domain, but with no IMEX to form."""
    clique_of: Mapping[NodeName, CliqueID]
    """The clique of every member that has one."""
    members: Mapping[CliqueID, frozenset[str]]
    """What each clique object should name as members: the members holding a slot there (the
    others it lists keep their slot until their agent lets go)."""


def may_free(snapshot: Snapshot, node: NodeName, clique: CliqueID) -> bool:
    """True when ``node``'s slot in ``clique`` may be given up (control-side.md, Slots).

    The node is gone; or it is in another clique now (it cannot serve this one any more); or
    it left the domain and its agent confirms it stopped IMEX for it (or serves another
    domain, idles, or has no pod any more).
    """
    uid = snapshot.domain.uid
    info = snapshot.nodes.get(node)
    if info is None:
        return True
    if info.member:
        return bool(info.clique) and info.clique != clique
    agent = snapshot.agents.get(node)
    return agent is None or agent.released(uid)


def _existing_clique_of(snapshot: Snapshot) -> dict[NodeName, CliqueID]:
    placed: dict[NodeName, CliqueID] = {}
    for clique, daemons in sorted(snapshot.cliques.items()):
        for daemon in daemons:
            placed.setdefault(NodeName(daemon.node_name), clique)
    return placed


def _place_members(snapshot: Snapshot) -> tuple[dict[NodeName, CliqueID], list[NodeName]]:
    """The clique of every member that has one, and the members without a fabric."""
    placed = _existing_clique_of(snapshot)
    pinned = {
        NodeName(d.node_name): clique
        for clique, daemons in snapshot.cliques.items()
        if frozencliques.is_frozen(daemons)
        for d in daemons
    }
    clique_of: dict[NodeName, CliqueID] = {}
    no_fabric: list[NodeName] = []
    for member in snapshot.members():
        if member.name in pinned:
            clique_of[member.name] = pinned[member.name]  # a frozen clique keeps its nodes
        elif member.clique:
            clique_of[member.name] = CliqueID(member.clique)
        elif member.name in placed:
            clique_of[member.name] = placed[member.name]
        else:
            no_fabric.append(member.name)
    return clique_of, no_fabric


def plan(snapshot: Snapshot, *, limit: int) -> CliquesPlan:
    """Assign slots in every clique of the domain and derive each clique's daemon list."""
    clique_of, no_fabric = _place_members(snapshot)
    plans: dict[CliqueID, slots.SlotPlan] = {}
    daemons: dict[CliqueID, tuple[models.CliqueDaemon, ...]] = {}
    named: dict[CliqueID, frozenset[str]] = {}
    for clique in sorted(set(snapshot.cliques) | set(clique_of.values())):
        stored = snapshot.cliques.get(clique, ())
        listed = {NodeName(d.node_name): d for d in stored}
        members = sorted(n for n, c in clique_of.items() if c == clique)
        releasable = {n for n in listed if n not in members and may_free(snapshot, n, clique)}
        result = slots.assign(
            existing={n: d.index for n, d in listed.items()},
            members=members,
            releasable=releasable,
            limit=limit,
            frozen=frozencliques.is_frozen(stored),
        )
        plans[clique] = result
        if frozencliques.is_frozen(stored):
            daemons[clique] = stored  # what it lists now: it is never rewritten
            named[clique] = snapshot.clique_members.get(clique) or frozenset()
            continue
        named[clique] = frozenset(n for n in members if n in result.slots)
        daemons[clique] = _daemons(snapshot, clique, result, listed)
    return CliquesPlan(
        slots=plans, daemons=daemons, no_fabric=tuple(no_fabric), clique_of=clique_of,
        members=named,
    )  # fmt: skip


def _daemons(
    snapshot: Snapshot,
    clique: CliqueID,
    result: slots.SlotPlan,
    listed: Mapping[NodeName, models.CliqueDaemon],
) -> tuple[models.CliqueDaemon, ...]:
    """What ``clique``'s object should list: each slot holder, its address and readiness."""
    uid = snapshot.domain.uid
    entries = []
    for node, index in sorted(result.slots.items(), key=lambda item: item[1]):
        agent = snapshot.agents.get(node)
        old = listed.get(node)
        ip = agent.ip if agent is not None and agent.ip else (old.ip_address if old else "")
        ready = agent is not None and agent.ready_for(uid)
        entries.append(
            models.CliqueDaemon(
                node_name=node,
                ip_address=ip,
                clique_id=clique,
                index=index,
                status=models.Status.READY if ready else models.Status.NOT_READY,
            )
        )
    return tuple(entries)


def _order(daemons: tuple[models.CliqueDaemon, ...]) -> list[models.CliqueDaemon]:
    return sorted(daemons, key=lambda d: (d.index if d.index is not None else -1, d.node_name))


def members_differ(snapshot: Snapshot, desired: CliquesPlan, clique: CliqueID) -> bool:
    """The members ``clique``'s object names are not the ones it should name."""
    return snapshot.clique_members.get(clique) != desired.members.get(clique)


def changed(
    snapshot: Snapshot, desired: CliquesPlan
) -> dict[CliqueID, tuple[models.CliqueDaemon, ...]]:
    """The cliques whose object must be written (empty tuple: deleted), nothing else."""
    current = snapshot.cliques
    out: dict[CliqueID, tuple[models.CliqueDaemon, ...]] = {}
    for clique in set(current) | set(desired.daemons):
        want = desired.daemons.get(clique, ())
        if not want:
            if clique in current:
                out[clique] = ()
        elif (
            clique not in current
            or _order(current[clique]) != _order(want)
            or members_differ(snapshot, desired, clique)
        ):
            out[clique] = want
    return out


def urgent(
    snapshot: Snapshot,
    desired: CliquesPlan,
    clique: CliqueID,
    write: tuple[models.CliqueDaemon, ...],
) -> bool:
    """True when agents need the ``write`` of ``clique`` now.

    That is when members, slots or addresses changed. A change of ``status`` alone only
    informs people, and can wait for the next status write.
    """
    current = snapshot.cliques.get(clique)
    if current is None or not write:
        return True
    if members_differ(snapshot, desired, clique):
        return True

    def wiring(daemons: tuple[models.CliqueDaemon, ...]) -> list[tuple[str, int | None, str]]:
        return [(d.node_name, d.index, d.ip_address) for d in _order(daemons)]

    return wiring(current) != wiring(write)
