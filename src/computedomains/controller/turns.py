"""Whose turn it is to place on free nodes: pure (docs/placement.md, "The turn").

Binding conditions settle a race between two domains for one free node, and cost the first
pod of a domain on a free node one scheduler poll (5 s). The race needs two domains placing in
the same moment, so while exactly one domain places, the controller gives it the turn: the
kubelet plugins taint every free node for it and publish no binding conditions, its claims
bind at once, and no other domain's claim can be allocated on a free node. The turn ends when
another domain starts placing; free nodes then carry binding conditions again.

A domain is **placing** while a claim of it waits for an allocation or for the binder's
answer, or holds a node the record does not name for it yet, and for :data:`WINDOW` seconds after it
appeared or one more claim of it was allocated (the pods of a workload arrive over a few
seconds, and a new domain's pods follow it). With nobody placing the turn stays where it is,
so the next pods of the last domain to place bind at once too. No domain has the turn while
a domain places whose waiting claims do not tolerate its own hold (a claim written by hand):
free nodes tainted for anyone would be closed to it.

Safety, which the rules below keep:

- The turn moves from one domain to another only when the first is not placing: none of its
  claims is unallocated and every node it took is in its record, so none can still be allocated on
  the old taint, and no free-looking node is still on its way to it (one created in the
  fraction of a second the plugins take to republish can: the plugin's refusal and the
  binder's unstranding then settle it, as without binding conditions).
- When the turn ends because a second domain places, the first may have allocations in
  flight on the old taint: the binder grants no claim on a free node for :data:`SETTLE`
  seconds after a turn ended (the scheduler polls every 5 s, so that costs nothing), by which
  time those allocations are written and hold their nodes (``placement.holder``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

WINDOW = 5.0
"""Seconds a domain counts as placing after its last sign of placement."""
SETTLE = 3.0
"""Seconds after a turn ended in which the binder grants nothing on a free node."""


@dataclasses.dataclass(frozen=True)
class Activity:
    """What the controller sees of one live domain's placement right now."""

    waiting: int
    """Claims of the domain without an allocation, or allocated with an unanswered binding
    condition."""
    allocated: int
    """Claims of the domain allocated a node (granted or unconditional)."""
    tolerant: bool = True
    """Every waiting claim tolerates the domain's own hold (its turn's taint)."""


@dataclasses.dataclass(frozen=True)
class State:
    """The turn and what it was decided from; the controller keeps the latest."""

    turn: str = ""
    """The domain whose turn it is ("" nobody's)."""
    ended_at: float | None = None
    """When a turn last ended (monotonic seconds), for :data:`SETTLE`."""
    active_at: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Per domain: when it was last seen placing (monotonic seconds)."""
    allocated: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Per domain: its allocated claims last time, so a new allocation counts as placing."""
    waiting: frozenset[str] = frozenset()
    """The domains that had a claim waiting last time: one deleted meanwhile may have
    allocations in flight."""


def placing(state: State, now: float) -> set[str]:
    """The domains placing at ``now`` according to ``state``."""
    return {uid for uid, at in state.active_at.items() if now - at < WINDOW}


def step(
    state: State,
    domains: Mapping[str, Activity],
    now: float,
    gone_waiting: frozenset[str] = frozenset(),
) -> State:
    """The next state, from the live domains' activity at ``now`` (monotonic seconds).

    ``domains`` holds every live (not deleting) domain; a domain missing from it is gone.
    ``gone_waiting``: the gone domains that still have a claim waiting now.
    """
    active_at: dict[str, float] = {}
    for uid, activity in domains.items():
        before = state.active_at.get(uid)
        placed = activity.allocated > state.allocated.get(uid, 0)
        if before is None or activity.waiting or placed:
            active_at[uid] = now  # new, waiting for a node, or just given one more
        else:
            active_at[uid] = before
    allocated = {uid: a.allocated for uid, a in domains.items()}
    waiting = frozenset(uid for uid, a in domains.items() if a.waiting)
    now_placing = placing(State(active_at=active_at), now)
    turn, ended_at = state.turn, state.ended_at
    # A turn whose domain is gone (or deleting) with no claim waiting ends without a settle:
    # nothing of it is in flight (docs/placement.md).
    gone = bool(turn) and turn not in domains
    if gone and (turn in state.waiting or turn in gone_waiting):
        # Deleted with claims still waiting: their allocations may be in flight, so settle.
        turn, ended_at, gone = "", now, False
    closed = any(not domains[uid].tolerant for uid in now_placing)
    if (len(now_placing) > 1 or closed) and turn and not gone:
        turn, ended_at = "", now  # a race is possible (or a domain needs free nodes open)
    elif len(now_placing) == 1 and not closed and turn not in now_placing:
        # From a domain that stopped placing or is gone (nothing of it is in flight), or from
        # nobody's once the last turn's allocations have landed (the settle).
        (only,) = now_placing
        if gone:
            turn = only
        elif turn:
            turn, ended_at = only, now
        elif ended_at is None or now - ended_at >= SETTLE:
            turn = only
    elif gone:
        turn = ""
    return State(
        turn=turn, ended_at=ended_at, active_at=active_at, allocated=allocated, waiting=waiting
    )


def ended(before: State, after: State) -> bool:
    """The step from ``before`` to ``after`` ended a turn with a settle (a race is possible).

    A turn that ended because its domain is gone needs none: the next domain may have the
    turn at once.
    """
    return not after.turn and after.ended_at != before.ended_at


def settling(state: State, now: float) -> float:
    """Seconds until the binder may grant on free nodes again (0: it may now)."""
    if state.ended_at is None:
        return 0.0
    return max(0.0, state.ended_at + SETTLE - now)


@dataclasses.dataclass(frozen=True)
class ClaimState:
    """One live channel claim as the turn sees it."""

    domain: str
    allocated: bool
    """Allocated a node, granted or without conditions (not refused)."""
    waiting: bool
    """Not allocated yet, waiting for the binder's answer, or holding a node not recorded yet."""
    tolerant: bool = True
    """Not allocated yet, and tolerates its domain's own hold (only those can be closed out)."""


def activity(claims: Iterable[ClaimState]) -> dict[str, Activity]:
    """Per domain, from the state of each of its claims."""
    waiting: dict[str, int] = {}
    allocated: dict[str, int] = {}
    intolerant: set[str] = set()
    for claim in claims:
        if not claim.domain:
            continue
        if claim.waiting:
            waiting[claim.domain] = waiting.get(claim.domain, 0) + 1
        if claim.allocated:
            allocated[claim.domain] = allocated.get(claim.domain, 0) + 1
        if not claim.tolerant:
            intolerant.add(claim.domain)
    return {
        uid: Activity(
            waiting=waiting.get(uid, 0),
            allocated=allocated.get(uid, 0),
            tolerant=uid not in intolerant,
        )
        for uid in waiting.keys() | allocated.keys()
    }
