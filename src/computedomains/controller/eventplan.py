"""The Events a reconcile records on a ComputeDomain, computed from what changed.

One Event per reason and status write, naming every node concerned: a burst of 18 joins is
one ``MemberJoined``, not eighteen. Most reasons describe the step from the stored status to
the one being written, so they survive a controller restart without repeats and are never
lost when a status write is postponed. Warnings about a lasting condition (a full clique, a
failing IMEX, a frozen clique, a ``Required`` domain spanning cliques: :mod:`cliquespan`,
planned by :mod:`decide`) are remembered in ``reported`` keys instead, so they are recorded
once per occurrence rather than per reconcile. ``SlotFreed`` goes with the clique write that
frees.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from computedomains.api import constants, models
from computedomains.controller import frozencliques
from computedomains.controller.membership import CliquesPlan
from computedomains.controller.views import Snapshot

_MAX_LISTED = 20
"""Nodes named in one message; Event messages are cut at 1 KiB."""
READY = models.Status.READY


class Reason(enum.StrEnum):
    """Event reasons on a ComputeDomain."""

    MEMBER_JOINED = "MemberJoined"
    SLOT_ASSIGNED = "SlotAssigned"
    CLIQUE_FULL = "CliqueFull"
    IMEX_READY = "IMEXReady"
    IMEX_FAILED = "IMEXFailed"
    MEMBER_LOST = "MemberLost"
    MEMBER_LEFT = "MemberLeft"
    SLOT_FREED = "SlotFreed"
    DOMAIN_READY = "DomainReady"
    TEMPLATE_CREATED = "ResourceClaimTemplateCreated"
    TEMPLATE_CONFLICT = "ResourceClaimTemplateConflict"
    TEMPLATE_REJECTED = "ResourceClaimTemplateRejected"
    CLIQUE_FROZEN = "CliqueFrozen"
    LABEL_WITHOUT_CLAIM = "NodeLabelWithoutClaim"
    LABEL_REFUSED = "NodeLabelRefused"
    DELETION_WAITING = "DeletionWaiting"
    SPANS_CLIQUES = "SpansCliques"
    """A ``clique: Required`` domain's members are in several cliques (:mod:`cliquespan`)."""


@dataclasses.dataclass(frozen=True)
class EventSpec:
    """One Event to record on the domain."""

    reason: Reason
    message: str
    warning: bool = False


def listing(items: Iterable[str]) -> str:
    """``a, b, c`` — at most a screenful, then how many more."""
    names = list(items)
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def plan(
    snapshot: Snapshot,
    cliques: CliquesPlan,
    desired: models.ComputeDomainStatusV1Beta2,
    *,
    previous: models.ComputeDomainStatusV1Beta2 | None,
    limit: int,
    reported: frozenset[str],
) -> tuple[list[EventSpec], frozenset[str]]:
    """Events that go with writing ``desired``, and the warning keys to remember.

    They describe the step from ``previous`` (the stored status, every member in it:
    :func:`status.previous`) to ``desired``, so they are recorded when (and only when) that
    status is written.
    """
    before = {n.name: n for n in previous.nodes} if previous is not None else {}
    after = {n.name: n for n in desired.nodes}
    events: list[EventSpec] = []
    joined = [_placed(n) for n in after.values() if n.name not in before]
    if joined:
        events.append(EventSpec(Reason.MEMBER_JOINED, f"{_count(len(joined), 'node')} joined: "
                                f"{listing(joined)}"))  # fmt: skip
    # A slot given with the join is told by MemberJoined: SlotAssigned is for slots that came
    # later (a full clique had room again, the node moved cliques).
    assigned = [
        _placed(n)
        for n in after.values()
        if n.name in before and _slot(n) is not None and _slot(before[n.name]) != _slot(n)
    ]
    if assigned:
        events.append(EventSpec(Reason.SLOT_ASSIGNED, listing(assigned)))
    warnings, keep = _lasting(snapshot, cliques, before, after, limit=limit, reported=reported)
    events += warnings
    events += _transitions(snapshot, before, after)
    was_ready = snapshot.domain.status is not None and snapshot.domain.status.status is READY
    if desired.status is READY and desired.nodes and not (was_ready and before):
        events.append(EventSpec(Reason.DOMAIN_READY, f"all {desired.nodes_ready} nodes ready"))
    return events, keep


def _lasting(
    snapshot: Snapshot,
    cliques: CliquesPlan,
    before: dict[str, models.ComputeDomainNode],
    after: dict[str, models.ComputeDomainNode],
    *,
    limit: int,
    reported: frozenset[str],
) -> tuple[list[EventSpec], frozenset[str]]:
    """Warnings about a lasting condition, once per occurrence, and the keys that remember them.

    A full clique, a failing IMEX, a label without a claim, a frozen clique.
    """
    uid = snapshot.domain.uid
    events: list[EventSpec] = []
    keep: set[str] = set()
    full = [(c, n) for c, r in sorted(cliques.slots.items()) for n in r.overflow]
    keep |= {f"{Reason.CLIQUE_FULL}/{n}" for _, n in full}
    new_full = [(c, n) for c, n in full if f"{Reason.CLIQUE_FULL}/{n}" not in reported]
    if new_full:
        message = (f"no slot left (limit {limit} per clique, --max-nodes-per-clique) for "
                   f"{listing(f'{n} in {c}' for c, n in new_full)}")  # fmt: skip
        events.append(EventSpec(Reason.CLIQUE_FULL, message, warning=True))
    failing = {n: a.detail for n, a in sorted(snapshot.agents.items())
               if n in after and a.failed_for(uid)}  # fmt: skip
    keep |= {f"{Reason.IMEX_FAILED}/{n}/{d}" for n, d in failing.items()}
    new_failing = [f"{n}: {d or 'no detail'}" for n, d in failing.items()
                   if f"{Reason.IMEX_FAILED}/{n}/{d}" not in reported]  # fmt: skip
    if new_failing:
        events.append(EventSpec(Reason.IMEX_FAILED, "; ".join(new_failing), warning=True))
    # A member leaving still carries the label in the round that takes it away: not forged.
    unclaimed = [n for n in snapshot.unclaimed_labels() if n not in before]
    keep |= {f"{Reason.LABEL_WITHOUT_CLAIM}/{n}" for n in unclaimed}
    new_unclaimed = [n for n in unclaimed if f"{Reason.LABEL_WITHOUT_CLAIM}/{n}" not in reported]
    if new_unclaimed:
        message = (f"{listing(new_unclaimed)} carry this domain's {constants.COMPUTE_DOMAIN_LABEL} "
                   "label, but no claim of the domain is allocated there: no slot is given (a "
                   "label alone admits no node; the controller removes it)")  # fmt: skip
        events.append(EventSpec(Reason.LABEL_WITHOUT_CLAIM, message, warning=True))
    frozen, frozen_keys = _frozen(snapshot, cliques, reported=reported)
    keep |= frozen_keys
    events += frozen
    return events, frozenset(keep)


def _frozen(
    snapshot: Snapshot, cliques: CliquesPlan, *, reported: frozenset[str]
) -> tuple[list[EventSpec], frozenset[str]]:
    """``CliqueFrozen``, once per clique and reason, and the keys that remember it."""
    reasons = {
        clique: daemons.reason
        for clique, daemons in sorted(snapshot.cliques.items())
        if isinstance(daemons, frozencliques.Frozen)
    }
    keys = {clique: f"{Reason.CLIQUE_FROZEN}/{clique}/{why}" for clique, why in reasons.items()}
    told = []
    for clique, why in reasons.items():
        if keys[clique] in reported:
            continue
        held = cliques.slots[clique].slots
        waiting = sorted(n for n, c in cliques.clique_of.items() if c == clique and n not in held)
        name = models.clique_name(snapshot.domain.uid, clique)
        told.append(
            f"ComputeDomainClique {name} cannot be read by this controller ({why}): its "
            f"{_count(len(held), 'slot')} stay as listed and it is not rewritten until a "
            "controller that reads it runs"
            + (f"; waiting for a slot: {listing(waiting)}" if waiting else "")
        )
    events = [EventSpec(Reason.CLIQUE_FROZEN, "; ".join(told), warning=True)] if told else []
    return events, frozenset(keys.values())


def _slot(node: models.ComputeDomainNode) -> tuple[str, int] | None:
    """(clique, slot) of a listed node, or None without one."""
    if not node.clique_id or node.index is None or node.index < 0:
        return None
    return node.clique_id, node.index


def _placed(node: models.ComputeDomainNode) -> str:
    """``name (slot i in clique)``, or the name alone without a slot."""
    slot = _slot(node)
    return f"{node.name} (slot {slot[1]} in {slot[0]})" if slot else node.name


def _transitions(
    snapshot: Snapshot,
    before: dict[str, models.ComputeDomainNode],
    after: dict[str, models.ComputeDomainNode],
) -> list[EventSpec]:
    """IMEXReady, MemberLost (IMEX gone on a member, or its node deleted), MemberLeft."""
    events = []
    became = [n.name for n in after.values() if n.clique_id and n.status is READY
              and (n.name not in before or before[n.name].status is not READY)]  # fmt: skip
    if became:
        events.append(EventSpec(Reason.IMEX_READY, f"IMEX ready on {listing(became)}"))
    lost = [n for n in after if n in before and before[n].status is READY
            and after[n].status is not READY]  # fmt: skip
    if lost:
        events.append(EventSpec(Reason.MEMBER_LOST, f"IMEX no longer ready on {listing(lost)}",
                                warning=True))  # fmt: skip
    gone = [n for n in before if n not in after]
    left = [n for n in gone if n in snapshot.nodes]
    deleted = [n for n in gone if n not in snapshot.nodes]
    if left:
        events.append(EventSpec(Reason.MEMBER_LEFT, f"{listing(left)} left the domain"))
    if deleted:
        events.append(EventSpec(Reason.MEMBER_LOST, f"node {listing(deleted)} was deleted",
                                warning=True))  # fmt: skip
    return events


def freed(cliques: CliquesPlan) -> list[EventSpec]:
    """SlotFreed for the slots released now (recorded with the clique write)."""
    slots = [
        f"{node} slot {index} in {clique}"
        for clique, result in sorted(cliques.slots.items())
        for node, index in sorted(result.freed.items(), key=lambda item: item[1])
    ]
    return [EventSpec(Reason.SLOT_FREED, listing(slots))] if slots else []
