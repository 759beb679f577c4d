"""The pure core of a reconcile: snapshot in, plan out (slots, cliques, status, Events).

Nothing here reads or writes the API; :mod:`computedomains.controller.reconciler` carries the
plan out. A plan lists only what differs from the snapshot, so an idle domain plans nothing,
and it never lists a frozen clique (:mod:`frozencliques`) unless the domain is released.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from computedomains.api import models
from computedomains.controller import (
    cliquespan,
    eventplan,
    frozencliques,
    membership,
    nodelabels,
    status,
)
from computedomains.controller.views import CliqueID, NodeName, Snapshot

READY = models.Status.READY
IMMEDIATE = frozenset({eventplan.Reason.DELETION_WAITING, eventplan.Reason.LABEL_WITHOUT_CLAIM})
"""Events never held back for the next status write: what they tell is happening now. A
deletion waits; a forged label is taken away this very round (label writes are never held
back), so its warning goes with it, or a later round would find nothing left to warn about."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one reconcile of one domain writes and records."""

    add_finalizer: bool
    create_template: bool
    delete_template: bool
    cliques: Mapping[CliqueID, tuple[models.CliqueDaemon, ...]]
    """Clique objects to write; an empty tuple deletes the object."""
    clique_members: Mapping[CliqueID, frozenset[str]]
    """The members each clique object written names (``CLIQUE_MEMBERS_ANNOTATION``)."""
    labels: tuple[nodelabels.LabelWrite, ...]
    """Node labels to write after the cliques: the record's copy (:mod:`nodelabels`)."""
    status: models.ComputeDomainStatusV1Beta2 | None
    """The status to write, or None when it is already shown."""
    events: tuple[eventplan.EventSpec, ...]
    """Events recorded with the clique writes (freed slots, a waiting deletion)."""
    status_events: tuple[eventplan.EventSpec, ...]
    """Events describing the status change, recorded once the status is written."""
    reported: frozenset[str]
    """Warning keys to pass to the next round (see :mod:`eventplan`)."""
    assigned: tuple[NodeName, ...]
    """Nodes that got a slot now (formation latency starts)."""
    became_ready: tuple[NodeName, ...]
    """Nodes whose IMEX turned ready now (formation latency ends)."""
    announced_ready: tuple[NodeName, ...]
    """Members the status written now shows Ready that the stored status did not."""
    holding_nodes: tuple[NodeName, ...]
    """While deleting: the members left (nodes still running pods of the domain)."""
    remove_finalizer: bool
    """Deleting, and nothing holds the domain any more: release the object."""
    domain_ready: bool
    """The domain is Ready with at least one node (written now or already shown)."""
    deferred: bool
    """Status, Events or readiness-only clique changes were held back (no ``flush``)."""
    members: tuple[models.ComputeDomainNode, ...] = ()
    """Every member as the status stands for it (``status`` lists at most 256): what the
    controller remembers once it has written ``status``, for the next round's ``remembered``."""
    cliques_plan: membership.CliquesPlan | None = dataclasses.field(default=None, compare=False)
    """The slot and membership decision the clique writes come from (its log line's)."""
    desired: models.ComputeDomainStatusV1Beta2 | None = dataclasses.field(
        default=None, compare=False
    )
    """The status as aggregated this round, every member in it, whether written or not."""

    @property
    def writes(self) -> bool:
        """True when carrying out the plan writes anything."""
        return bool(
            self.add_finalizer or self.create_template or self.delete_template or self.cliques
            or self.labels or self.status is not None or self.events or self.status_events
            or self.remove_finalizer
        )  # fmt: skip


def plan(
    snapshot: Snapshot,
    *,
    limit: int,
    reported: frozenset[str],
    flush: bool = True,
    remembered: tuple[models.ComputeDomainNode, ...] | None = None,
) -> Plan:
    """Decide one round for the domain of ``snapshot`` (max ``limit`` slots per clique).

    Without ``flush``, only what agents wait for is planned (finalizer, template, slot and
    address changes of cliques, freed slots); the status, its Events and readiness-only
    clique changes are held back and ``deferred`` says whether anything was. ``remembered``
    is the full member list of the status this controller wrote last (``Plan.members``).
    """
    domain = snapshot.domain
    cliques = membership.plan(snapshot, limit=limit)
    desired = status.aggregate(snapshot, cliques, remembered=remembered)
    before = status.previous(domain.status, desired.nodes, remembered=remembered)
    status_events, keep = _status_events(
        snapshot, cliques, desired, before=before, limit=limit, reported=reported
    )
    # A node leaves with its last claim, so with its last pod.
    holding = tuple(n.name for n in snapshot.members()) if domain.deleting else ()
    events, waiting_key = _clique_events(cliques, holding=holding, reported=reported)
    keep |= waiting_key
    release = domain.deleting and domain.finalized and not holding
    writes = _clique_writes(snapshot, cliques, release=release)
    written = status.shown(desired)
    new_status = written if status.differs(domain.status, written) and not release else None
    urgent = {c: d for c, d in writes.items() if membership.urgent(snapshot, cliques, c, d)}
    now_events, now_keys = _immediate(status_events, keep, reported=reported)
    held_back = new_status is not None or now_events != status_events or len(urgent) < len(writes)
    if not flush and not release:
        writes, new_status, keep, status_events = urgent, None, now_keys, now_events
    return Plan(
        add_finalizer=not domain.deleting and not domain.finalized,
        create_template=not domain.deleting
        and bool(domain.template)
        and not snapshot.template_present,
        delete_template=snapshot.template_present
        and (domain.deleting or snapshot.template_outdated),
        cliques=writes,
        clique_members={c: cliques.members.get(c, frozenset()) for c in writes},
        labels=nodelabels.plan(snapshot, release=release),
        status=new_status,
        events=tuple(events),
        status_events=tuple(status_events),
        reported=keep,
        assigned=tuple(n for r in cliques.slots.values() for n in r.assigned),
        became_ready=_became_ready(snapshot, cliques),
        announced_ready=_announced(before, desired) if new_status is not None else (),
        holding_nodes=holding,
        remove_finalizer=release,
        domain_ready=desired.status is models.Status.READY and bool(desired.nodes),
        members=desired.nodes,
        deferred=held_back and not flush and not release,
        cliques_plan=cliques,
        desired=desired,
    )


def _status_events(
    snapshot: Snapshot,
    cliques: membership.CliquesPlan,
    desired: models.ComputeDomainStatusV1Beta2,
    *,
    before: models.ComputeDomainStatusV1Beta2 | None,
    limit: int,
    reported: frozenset[str],
) -> tuple[list[eventplan.EventSpec], frozenset[str]]:
    """The Events that go with the status write, and the warning keys to remember."""
    status_events, keep = eventplan.plan(
        snapshot, cliques, desired, previous=before, limit=limit, reported=reported
    )
    # With the status Events, as the condition telling the same goes with that write; planned
    # here because cliquespan words it with eventplan's helpers.
    spread, spread_key = cliquespan.event(
        cliquespan.of(desired.nodes, snapshot.domain.clique), reported=reported
    )
    return status_events + spread, keep | spread_key


def _clique_events(
    cliques: membership.CliquesPlan, *, holding: tuple[NodeName, ...], reported: frozenset[str]
) -> tuple[list[eventplan.EventSpec], frozenset[str]]:
    """The Events that go with the clique writes (freed slots, a deletion waiting on nodes)."""
    events = eventplan.freed(cliques)
    if not holding:
        return events, frozenset()
    key = f"{eventplan.Reason.DELETION_WAITING}/{len(holding)}"
    if key not in reported:
        message = (
            f"deletion waits for {len(holding)} node(s) still running pods of this domain "
            f"(each leaves with its last pod): {eventplan.listing(holding)}"
        )
        events.append(eventplan.EventSpec(eventplan.Reason.DELETION_WAITING, message))
    return events, frozenset({key})


def _clique_writes(
    snapshot: Snapshot, cliques: membership.CliquesPlan, *, release: bool
) -> dict[CliqueID, tuple[models.CliqueDaemon, ...]]:
    """The clique objects to write: those that changed and are not frozen, or all, deleted."""
    if release:
        # Nobody runs the domain any more: its cliques go, whatever their agents still say.
        return {clique: () for clique in snapshot.cliques}
    return {
        clique: daemons
        for clique, daemons in membership.changed(snapshot, cliques).items()
        if not frozencliques.is_frozen(snapshot.cliques.get(clique))
    }


def _announced(
    before: models.ComputeDomainStatusV1Beta2 | None,
    desired: models.ComputeDomainStatusV1Beta2,
) -> tuple[NodeName, ...]:
    """Members ``desired`` shows Ready that the stored status (``before``) did not."""
    shown_ready = {n.name for n in (before.nodes if before else ()) if n.status is READY}
    return tuple(
        NodeName(n.name) for n in desired.nodes if n.status is READY and n.name not in shown_ready
    )


def _immediate(
    events: list[eventplan.EventSpec], keys: frozenset[str], *, reported: frozenset[str]
) -> tuple[list[eventplan.EventSpec], frozenset[str]]:
    """The Events never held back (:data:`IMMEDIATE`), and the keys a holding-back round keeps.

    Those are this round's keys of the Events sent (a forged label gone is forgotten, so one
    forged again is warned about again) and the keys remembered so far of the rest.
    """

    def immediate(key: str) -> bool:
        return key.split("/", 1)[0] in IMMEDIATE

    kept = {k for k in keys if immediate(k)} | {k for k in reported if not immediate(k)}
    return [e for e in events if e.reason in IMMEDIATE], frozenset(kept)


def _became_ready(snapshot: Snapshot, cliques: membership.CliquesPlan) -> tuple[NodeName, ...]:
    """Nodes whose IMEX is ready now but not in the stored clique (formation latency ends)."""
    was_ready = {
        d.node_name
        for ds in snapshot.cliques.values()
        for d in ds
        if d.status is models.Status.READY
    }
    return tuple(
        NodeName(d.node_name)
        for ds in cliques.daemons.values()
        for d in ds
        if d.status is models.Status.READY and d.node_name not in was_ready
    )
