"""The v1beta2 conditions of a ComputeDomain, computed from its listed nodes (pure).

Three conditions, each with a reason and ``observedGeneration`` (docs/control-side.md, Status):

- ``Formed``: every member's IMEX daemon is ready (a member without a fabric counts as ready:
  it has no IMEX to form). False with ``NoMembers`` while nobody has joined, ``CliqueFull``
  while a member waits for a slot, else ``DaemonsNotReady``.
- ``Ready``: Formed, with at least one member and at least the v1beta1 ``numNodes`` of them.
  False with ``NoMembers``, ``NotFormed`` or ``WaitingForNodes``. ``status.status`` says the
  same (Ready exactly when this is True), so a domain nobody has joined is not Ready.
- ``Degraded``: True (``MembersLost``) from the round a member whose daemon was ready is not
  any more (or its node was deleted while the rest is not Formed), until the domain is Formed
  again or has no members left; True (``SpansCliques``) while a ``clique: Required`` domain's
  members are in more than one clique (:mod:`cliquespan`; with ``MembersLost`` at once, that
  reason wins and the message tells both); otherwise False (``NoMembers``, or
  ``NotDegraded``). A member that *leaves* (its last pod went) does not degrade the domain,
  nor does a deleted node whose peers are all ready: what is left is a formed domain.

  A spread ``Required`` domain is a reason of ``Degraded`` rather than a condition of its own:
  it runs (each clique forms its own IMEX domain, and ``Ready`` says so) but not as asked, since
  no NVLink joins its cliques, which is what ``Degraded`` tells whoever watches it; a further
  type would be one nobody's alerts know yet.

Messages are made of what ``status.nodes`` shows, so a condition changes only when the listed
nodes do and costs no status write of its own. ``lastTransitionTime`` moves only when a
condition's status changes.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

from computedomains.api import models
from computedomains.controller import cliquespan, eventplan

READY = models.Status.READY
TRUE, FALSE = models.ConditionStatus.TRUE, models.ConditionStatus.FALSE


class Type(enum.StrEnum):
    """Condition types of a ComputeDomain."""

    READY = "Ready"
    FORMED = "Formed"
    DEGRADED = "Degraded"


class Reason(enum.StrEnum):
    """Condition reasons of a ComputeDomain."""

    ALL_NODES_READY = "AllNodesReady"
    """Ready True."""
    NO_MEMBERS = "NoMembers"
    """Nobody has joined (no pod of the domain runs): Ready, Formed and Degraded False."""
    NOT_FORMED = "NotFormed"
    """Ready False: some member's IMEX daemon is not ready."""
    WAITING_FOR_NODES = "WaitingForNodes"
    """Ready False: fewer members than numNodes."""
    ALL_DAEMONS_READY = "AllDaemonsReady"
    """Formed True."""
    CLIQUE_FULL = "CliqueFull"
    """Formed False: a member got no slot in its full clique."""
    DAEMONS_NOT_READY = "DaemonsNotReady"
    """Formed False: members' IMEX daemons are starting or failing."""
    MEMBERS_LOST = "MembersLost"
    """Degraded True: a ready member is not ready any more, or its node was deleted."""
    SPANS_CLIQUES = "SpansCliques"
    """Degraded True: a ``clique: Required`` domain's members are in several cliques."""
    NOT_DEGRADED = "NotDegraded"
    """Degraded False."""


def compute(
    nodes: Sequence[models.ComputeDomainNode],
    *,
    num_nodes: int,
    placement: models.CliquePlacement,
    generation: int,
    previous: models.ComputeDomainStatusV1Beta2 | None,
    existing_nodes: Collection[str],
    now: str,
) -> tuple[models.Condition, ...]:
    """Ready, Formed and Degraded for a domain listing ``nodes`` now.

    ``previous`` is the stored status (what was ready, and the stored conditions, whose
    transition times carry over); ``existing_nodes``: node names that still exist, to tell a
    deleted member from one that left; ``now``: the transition time of a changed condition;
    ``placement``: the domain's ``spec.placement.clique``.
    """
    waiting = [n.name for n in nodes if n.status is not READY]
    ready = len(nodes) - len(waiting)
    if not nodes:
        formed = (FALSE, Reason.NO_MEMBERS, "no node has joined: no pod of the domain runs")
        ready_c = formed
    else:
        if not waiting:
            formed = (TRUE, Reason.ALL_DAEMONS_READY,
                      f"IMEX daemons ready on all {len(nodes)} member node(s)")  # fmt: skip
        else:
            unslotted = [n.name for n in nodes if n.clique_id and n.index is None]
            formed = (
                (FALSE, Reason.CLIQUE_FULL,
                 f"no slot left in their clique for {eventplan.listing(unslotted)}")
                if unslotted
                else (FALSE, Reason.DAEMONS_NOT_READY,
                      f"IMEX ready on {ready}/{len(nodes)} member node(s); waiting for "
                      f"{eventplan.listing(waiting)}")
            )  # fmt: skip
        if waiting:
            ready_c = (FALSE, Reason.NOT_FORMED, formed[2])
        elif len(nodes) < num_nodes:
            ready_c = (FALSE, Reason.WAITING_FOR_NODES,
                       f"{len(nodes)} of numNodes {num_nodes} node(s) have joined")  # fmt: skip
        else:
            ready_c = (TRUE, Reason.ALL_NODES_READY, f"all {len(nodes)} node(s) ready")
    spread = cliquespan.of(nodes, placement)
    degraded = _degraded(nodes, previous, existing_nodes, formed=formed[0] is TRUE, spread=spread)
    wanted = {Type.READY: ready_c, Type.FORMED: formed, Type.DEGRADED: degraded}
    out = []
    for type_, (status, reason, message) in wanted.items():
        before = previous.condition(type_) if previous is not None else None
        since = before.last_transition_time if before and before.status is status else now
        out.append(
            models.Condition(
                type=type_, status=status, reason=reason, message=message,
                observed_generation=generation, last_transition_time=since,
            )
        )  # fmt: skip
    return tuple(out)


def _degraded(
    nodes: Sequence[models.ComputeDomainNode],
    previous: models.ComputeDomainStatusV1Beta2 | None,
    existing_nodes: Collection[str],
    *,
    formed: bool,
    spread: cliquespan.Spread | None,
) -> tuple[models.ConditionStatus, str, str]:
    if not nodes:
        return FALSE, Reason.NO_MEMBERS, "no node has joined"
    lost = _lost(nodes, previous, existing_nodes, formed=formed)
    if lost is not None:
        told = f"{lost}; {spread.message}" if spread is not None else lost
        return TRUE, Reason.MEMBERS_LOST, told
    if spread is not None:
        return TRUE, Reason.SPANS_CLIQUES, spread.message
    if formed:
        return FALSE, Reason.NOT_DEGRADED, "every member is ready"
    return FALSE, Reason.NOT_DEGRADED, "no member that was ready has been lost"


def _lost(
    nodes: Sequence[models.ComputeDomainNode],
    previous: models.ComputeDomainStatusV1Beta2 | None,
    existing_nodes: Collection[str],
    *,
    formed: bool,
) -> str | None:
    """What ``MembersLost`` says now (lost members, deleted nodes), or None when it is not."""
    if formed:
        return None
    was_ready = {n.name for n in previous.nodes if n.status is READY} if previous else set()
    now_listed = {n.name: n for n in nodes}
    lost = sorted(n for n in was_ready if n in now_listed and now_listed[n].status is not READY)
    deleted = sorted(n for n in was_ready if n not in now_listed and n not in existing_nodes)
    if lost or deleted:
        parts = [f"IMEX no longer ready on {eventplan.listing(lost)}"] if lost else []
        parts += [f"node {eventplan.listing(deleted)} deleted"] if deleted else []
        return "; ".join(parts)
    before = previous.condition(Type.DEGRADED) if previous is not None else None
    if before is not None and before.status is TRUE and before.reason == Reason.MEMBERS_LOST:
        # Until Formed again: said once, kept; the spread it told then is told anew.
        return before.message.split(f"; {cliquespan.PREFIX}")[0]
    return None
