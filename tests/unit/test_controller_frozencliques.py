"""Frozen cliques: an unreadable or newer-schema clique object never frees or moves a slot."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains.api import constants, models
from computedomains.controller import decide, frozencliques, objects
from computedomains.controller.frozencliques import Frozen
from computedomains.controller.views import NodeName
from tests.support.snapshots import C1, C2, UID, agent, daemon, domain, node, snapshot

READY = models.Status.READY


def clique_object(*daemons: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = objects.clique_object(namespace="drv", uid=UID, clique=C1, daemons=(), members=())
    body["daemons"] = list(daemons)
    return {**body, **fields}


def entry(name: str, index: Any, **fields: Any) -> dict[str, Any]:
    return {"nodeName": name, "ipAddress": "10.0.0.1", "cliqueID": C1, "index": index,
            "status": "Ready", **fields}  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "reason", "salvaged"),
    [
        pytest.param(clique_object(entry("a", 0)), None, [("a", 0)], id="readable"),
        pytest.param(clique_object(entry("a", 0), apiVersion=f"{constants.GROUP}/v1beta3"),
                     "apiVersion", [("a", 0)], id="a newer apiVersion"),
        pytest.param(clique_object(entry("a", 0), generation=3), "generation: unknown field",
                     [("a", 0)], id="an unknown top-level field"),
        pytest.param(clique_object(entry("a", 0, slotGeneration=2), entry("b", 1)),
                     "slotGeneration: unknown field", [("a", 0), ("b", 1)],
                     id="an unknown field in an entry"),
        pytest.param(clique_object(entry("a", "zero"), entry("b", 1)), "index",
                     [("a", None), ("b", 1)], id="an index that is no number holds nothing"),
        pytest.param(clique_object(entry("", 2), {"index": 3}, "junk", entry("b", True)),
                     "daemons", [("b", None)], id="entries without a node are left out"),
        pytest.param({**clique_object(), "daemons": "all of them"}, "daemons", [],
                     id="daemons is no list"),
    ],
)  # fmt: skip
def test_read(obj: dict[str, Any], reason: str | None, salvaged: list[tuple[str, Any]]) -> None:
    daemons = frozencliques.read(obj)
    assert [(d.node_name, d.index) for d in daemons] == salvaged
    if reason is None:
        assert not frozencliques.is_frozen(daemons)
    else:
        assert isinstance(daemons, Frozen)
        assert reason in daemons.reason


def frozen(*daemons: models.CliqueDaemon, reason: str = "apiVersion 'v9'") -> Frozen:
    return Frozen(daemons, reason=reason)


HELD = frozen(daemon("a", 0, ready=True), daemon("b", 1, ready=True))


@pytest.mark.parametrize(
    ("nodes", "cliques", "writes", "status_slots"),
    [
        pytest.param([node("a"), node("b")], {C1: HELD}, {}, {"a": 0, "b": 1},
                     id="members keep their slots; nothing written"),
        pytest.param([node("a"), node("b"), node("c")], {C1: HELD}, {},
                     {"a": 0, "b": 1, "c": None}, id="a newcomer waits: a slot could collide"),
        pytest.param([node("a", domain=""), node("b")], {C1: HELD}, {}, {"b": 1},
                     id="a leaver's slot is not freed"),
        pytest.param([node("a", clique=C2), node("b")], {C1: HELD}, {}, {"a": 0, "b": 1},
                     id="a member it lists stays in it, whatever its label says"),
        pytest.param([node("a"), node("b"), node("d", clique=C2)], {C1: HELD},
                     {C2: (daemon("d", 0, clique=C2),)}, {"a": 0, "b": 1, "d": 0},
                     id="other cliques go on as usual"),
        pytest.param([node("a")], {C1: frozen(reason="daemons: expected an array")}, {},
                     {"a": None}, id="nothing readable: neither deleted nor filled"),
    ],
)  # fmt: skip
def test_a_frozen_clique_is_never_rewritten(
    nodes: list[Any],
    cliques: dict[Any, tuple[models.CliqueDaemon, ...]],
    writes: dict[Any, tuple[models.CliqueDaemon, ...]],
    status_slots: dict[str, int | None],
) -> None:
    agents = [agent(n.name, ip="") for n in nodes]
    plan = decide.plan(snapshot(nodes=nodes, agents=agents, cliques=cliques), limit=18,
                       reported=frozenset())  # fmt: skip
    assert {c: [(d.node_name, d.index) for d in ds] for c, ds in plan.cliques.items()} == {
        c: [(d.node_name, d.index) for d in ds] for c, ds in writes.items()
    }
    assert plan.status is not None
    assert {n.name: n.index for n in plan.status.nodes} == status_slots
    assert "SlotFreed" not in [e.reason for e in plan.events]
    assert "CliqueFull" not in [e.reason for e in plan.status_events]


def test_a_frozen_clique_is_reported_once_per_reason() -> None:
    snap = snapshot(nodes=[node("a"), node("c")], cliques={C1: HELD})
    first = decide.plan(snap, limit=18, reported=frozenset())
    [warning] = [e for e in first.status_events if e.reason == "CliqueFrozen"]
    assert warning.warning
    assert f"{UID}.{C1}" in warning.message
    assert "apiVersion 'v9'" in warning.message
    assert "2 slots stay as listed" in warning.message
    assert "waiting for a slot: c" in warning.message
    again = decide.plan(snap, limit=18, reported=first.reported)
    assert "CliqueFrozen" not in [e.reason for e in again.status_events]
    other = snapshot(nodes=[node("a")], cliques={C1: frozen(*HELD, reason="another reason")})
    assert "CliqueFrozen" in [
        e.reason for e in decide.plan(other, limit=18, reported=first.reported).status_events
    ]


def test_a_released_domain_deletes_its_frozen_cliques_too() -> None:
    snap = snapshot(dom=domain(deleting=True), nodes=[node("a", domain="")], cliques={C1: HELD},
                    template=False)  # fmt: skip
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.remove_finalizer
    assert plan.cliques == {C1: ()}


def test_slots_in_a_frozen_clique_are_held_for_the_status_and_membership() -> None:
    snap = snapshot(nodes=[node("a"), node("b")], agents=[agent("a"), agent("b")],
                    cliques={C1: HELD})  # fmt: skip
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.status is not None
    assert plan.status.status is READY
    assert [(n.name, n.clique_id, n.index) for n in plan.status.nodes] == [
        (NodeName("a"), C1, 0),
        (NodeName("b"), C1, 1),
    ]
