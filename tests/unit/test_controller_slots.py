"""Slot assignment within a clique: lowest free, stable, freed only when released."""

from __future__ import annotations

import random
from collections.abc import Collection

import pytest

from computedomains.controller import slots
from computedomains.controller.views import NodeName


def run(
    existing: dict[str, int | None],
    members: list[str],
    releasable: Collection[str] = (),
    limit: int = 18,
) -> slots.SlotPlan:
    return slots.assign(
        existing={NodeName(k): v for k, v in existing.items()},
        members=[NodeName(m) for m in members],
        releasable={NodeName(r) for r in releasable},
        limit=limit,
    )


@pytest.mark.parametrize(
    ("existing", "members", "releasable", "limit", "want_slots", "assigned", "freed", "overflow"),
    [
        pytest.param({}, ["c", "a", "b"], set(), 18, {"a": 0, "b": 1, "c": 2},
                     {"a": 0, "b": 1, "c": 2}, {}, (), id="newcomers in name order"),
        pytest.param({"a": 0, "c": 2}, ["a", "b", "c"], set(), 18, {"a": 0, "b": 1, "c": 2},
                     {"b": 1}, {}, (), id="lowest free slot, others untouched"),
        pytest.param({"a": 0, "b": 1}, ["b"], set(), 18, {"a": 0, "b": 1}, {}, {}, (),
                     id="a departed node keeps its slot until released"),
        pytest.param({"a": 0, "b": 1}, ["b"], {"a"}, 18, {"b": 1}, {}, {"a": 0}, (),
                     id="released slot is freed"),
        pytest.param({"a": 0, "b": 1}, ["b", "c"], {"a"}, 18, {"b": 1, "c": 0}, {"c": 0},
                     {"a": 0}, (), id="a freed slot is reused at once"),
        pytest.param({"a": 0, "b": 1}, ["a", "b", "c"], {"a"}, 18, {"a": 0, "b": 1, "c": 2},
                     {"c": 2}, {}, (), id="a member is never released"),
        pytest.param({}, ["a", "b", "c"], set(), 2, {"a": 0, "b": 1}, {"a": 0, "b": 1}, {},
                     ("c",), id="overflow at the limit"),
        pytest.param({"a": 0, "b": 1}, ["a", "b", "c"], set(), 2, {"a": 0, "b": 1}, {}, {},
                     ("c",), id="a full clique never evicts a member"),
        pytest.param({"x": 0, "y": 1}, ["a"], set(), 2, {"x": 0, "y": 1}, {}, {}, ("a",),
                     id="departed but unreleased slots still count"),
        pytest.param({"a": None, "b": 1}, ["a", "b"], set(), 18, {"a": 0, "b": 1}, {"a": 0},
                     {}, (), id="an entry without index gets one"),
        pytest.param({"a": 0, "b": 0}, ["a", "b"], set(), 18, {"a": 0, "b": 1}, {"b": 1}, {},
                     (), id="a duplicate index goes to one node, the other gets a new slot"),
        pytest.param({"a": 5}, ["a"], set(), 4, {"a": 0}, {"a": 0}, {}, (),
                     id="an index beyond a lowered limit is replaced"),
        pytest.param({"a": -3}, [], set(), 18, {}, {}, {}, (),
                     id="a departed entry with a broken index is dropped"),
    ],
)  # fmt: skip
def test_assign(
    existing: dict[str, int | None],
    members: list[str],
    releasable: set[str],
    limit: int,
    want_slots: dict[str, int],
    assigned: dict[str, int],
    freed: dict[str, int],
    overflow: tuple[str, ...],
) -> None:
    result = run(existing, members, releasable, limit)
    assert result.slots == want_slots
    assert result.assigned == assigned
    assert result.freed == freed
    assert result.overflow == overflow


@pytest.mark.parametrize(
    ("existing", "members", "releasable", "want_slots"),
    [
        pytest.param({"a": 0, "b": 1}, ["a", "b", "c"], set(), {"a": 0, "b": 1},
                     id="a newcomer gets nothing: slot 2 might collide"),
        pytest.param({"a": 0, "b": 1}, ["b"], {"a"}, {"a": 0, "b": 1},
                     id="a released slot is not freed"),
        pytest.param({"a": 0, "b": 0, "c": 25}, ["a", "b", "c"], set(),
                     {"a": 0, "b": 0, "c": 25}, id="whatever it lists stays as listed"),
        pytest.param({"a": None, "b": 3}, ["a", "b"], set(), {"b": 3},
                     id="an entry without index holds nothing and gets nothing"),
        pytest.param({}, ["a"], set(), {}, id="nothing readable: nothing assigned"),
    ],
)  # fmt: skip
def test_a_frozen_clique_changes_nothing(
    existing: dict[str, int | None],
    members: list[str],
    releasable: set[str],
    want_slots: dict[str, int],
) -> None:
    result = slots.assign(
        existing={NodeName(k): v for k, v in existing.items()},
        members=[NodeName(m) for m in members],
        releasable={NodeName(r) for r in releasable},
        limit=18,
        frozen=True,
    )
    assert result.slots == want_slots
    assert result.assigned == result.freed == {}
    assert result.overflow == ()  # not full: waiting for a controller that can read it


def test_churn_never_moves_a_held_slot_nor_hands_one_out_twice() -> None:
    rng = random.Random(11)
    nodes = [f"n{i:02d}" for i in range(24)]
    held: dict[str, int | None] = {}
    members: set[str] = set()
    for _ in range(500):
        node = rng.choice(nodes)
        if node in members:
            members.discard(node)
        else:
            members.add(node)
        released = {n for n in held if n not in members and rng.random() < 0.5}
        result = run(held, sorted(members), released, limit=18)
        for kept, index in held.items():
            if kept in result.slots:
                assert result.slots[kept] == index, f"{kept} moved"
        assert len(set(result.slots.values())) == len(result.slots)
        assert all(0 <= i < 18 for i in result.slots.values())
        assert set(result.overflow) | set(result.slots) >= members
        held = dict(result.slots)
