"""Slot assignment within one clique: lowest free index, stable, freed only when released.

IMEX names every peer by its slot (``nodes.cfg``), so a slot that moves under a running IMEX
breaks the whole domain (user-pain P3). The rules, pure and table-tested:

- a node that holds a valid slot keeps it for as long as it holds it;
- a slot is freed only when the caller says the node released it (``releasable``);
- a newcomer takes the lowest index not held, below ``limit``; newcomers are served in name
  order, so the same inputs always give the same answer;
- a newcomer for whom no index is left overflows and gets none;
- an entry whose index is missing, negative, at or above ``limit`` or already taken (a hand
  edit, a lowered limit) holds nothing: a member there gets a fresh slot like a newcomer;
- a frozen clique (its object cannot be fully read: :mod:`frozencliques`) changes not at all:
  every index it lists stays held as listed, none is freed, none is assigned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from computedomains.controller.views import NodeName


@dataclasses.dataclass(frozen=True)
class SlotPlan:
    """The outcome for one clique."""

    slots: Mapping[NodeName, int]
    """Every node holding a slot afterwards: kept and newly assigned."""
    assigned: Mapping[NodeName, int]
    """Slots given out now."""
    freed: Mapping[NodeName, int]
    """Slots released now."""
    overflow: tuple[NodeName, ...]
    """Members that need a slot and got none (the clique is full)."""


def assign(
    *,
    existing: Mapping[NodeName, int | None],
    members: Sequence[NodeName],
    releasable: Collection[NodeName],
    limit: int,
    frozen: bool = False,
) -> SlotPlan:
    """Slots of one clique after one round.

    ``existing``: node → index as the clique object lists them. ``members``: nodes that are
    in this clique of the domain now. ``releasable``: listed non-members whose release is
    confirmed (their slot may be freed); listed non-members not in it keep their slot.
    ``frozen``: the object cannot be rewritten, so ``existing`` is the answer; members it
    does not list wait without a slot (they are not ``overflow``: the clique is not full).
    """
    if frozen:
        held = {node: index for node, index in existing.items() if index is not None}
        return SlotPlan(slots=held, assigned={}, freed={}, overflow=())
    wanted = set(members)
    kept: dict[NodeName, int] = {}
    freed: dict[NodeName, int] = {}

    def order(node: NodeName) -> tuple[int, str]:
        index = existing[node]
        return (index if index is not None else limit, node)

    for node in sorted(existing, key=order):
        index = existing[node]
        valid = index is not None and 0 <= index < limit and index not in kept.values()
        if node not in wanted and node in releasable:
            if valid and index is not None:
                freed[node] = index
            continue
        if valid and index is not None:
            kept[node] = index
    free = (i for i in range(limit) if i not in set(kept.values()))
    assigned: dict[NodeName, int] = {}
    overflow: list[NodeName] = []
    for node in sorted(wanted - set(kept)):
        index = next(free, None)
        if index is None:
            overflow.append(node)
        else:
            assigned[node] = index
    return SlotPlan(
        slots={**kept, **assigned}, assigned=assigned, freed=freed, overflow=tuple(overflow)
    )
