"""Status aggregation and Event planning of a ComputeDomain, as tables and as rounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from computedomains.api import imex, models
from computedomains.controller import decide, membership, status
from computedomains.controller.views import Agent, CliqueID, NodeInfo, Snapshot
from tests.support.snapshots import C1, agent, daemon, domain, node, snapshot

R = imex.Reason
READY, NOT_READY = models.Status.READY, models.Status.NOT_READY


def aggregate(snap: Snapshot, limit: int = 18) -> models.ComputeDomainStatusV1Beta2:
    return status.aggregate(snap, membership.plan(snap, limit=limit))


@pytest.mark.parametrize(
    ("nodes", "agents", "num_nodes", "overall", "shown"),
    [
        pytest.param([], [], 0, NOT_READY, "0/0",
                     id="empty domain is not Ready (the incumbent's says Ready)"),
        pytest.param([], [], 2, NOT_READY, "0/2", id="numNodes not reached"),
        pytest.param([node("a"), node("b")], [agent("a"), agent("b")], 0, READY, "2/2",
                     id="all ready"),
        pytest.param([node("a"), node("b")], [agent("a"), agent("b", R.STARTING)], 0, NOT_READY,
                     "1/2", id="one starting"),
        pytest.param([node("a"), node("b")], [agent("a"), agent("b")], 3, NOT_READY, "2/3",
                     id="ready but fewer than numNodes"),
        pytest.param([node("a")], [agent("a", domain="other")], 0, NOT_READY, "0/1",
                     id="agent ready for another domain"),
        pytest.param([node("a", clique="")], [], 0, READY, "1/1", id="no fabric: nothing to form"),
        pytest.param([node("a"), node("b", domain="")], [agent("a"), agent("b")], 0, READY, "1/1",
                     id="a node that left is not listed"),
    ],
)  # fmt: skip
def test_aggregate(
    nodes: list[NodeInfo], agents: list[Agent], num_nodes: int, overall: models.Status, shown: str
) -> None:
    snap = snapshot(
        dom=domain(num_nodes=num_nodes), nodes=nodes, agents=agents,
        cliques={C1: (daemon("b", 1),)},
    )  # fmt: skip
    result = aggregate(snap)
    assert (result.status, result.nodes_ready) == (overall, shown)


def test_listed_nodes_carry_slot_ip_clique_and_overflow_shows_without_slot() -> None:
    snap = snapshot(
        nodes=[node("a"), node("b"), node("c"), node("z", clique="")],
        agents=[agent("a", ip="10.0.0.1"), agent("b", ip="10.0.0.2")],
    )
    result = aggregate(snap, limit=2)
    assert result.nodes == (
        models.ComputeDomainNode(name="z", ip_address="", clique_id="", index=-1, status=READY),
        models.ComputeDomainNode(name="a", ip_address="10.0.0.1", clique_id=C1, index=0,
                                 status=READY),
        models.ComputeDomainNode(name="b", ip_address="10.0.0.2", clique_id=C1, index=1,
                                 status=READY),
        models.ComputeDomainNode(name="c", ip_address="", clique_id=C1, index=None,
                                 status=NOT_READY),
    )  # fmt: skip
    assert result.status is NOT_READY
    assert not status.differs(result, dataclasses.replace(result, nodes=result.nodes[::-1]))
    assert status.differs(None, result)


class Rounds:
    """Runs plans one after another, storing what each wrote, as the API server would."""

    def __init__(self, limit: int = 18) -> None:
        self.limit = limit
        self.snap = snapshot()
        self.reported: frozenset[str] = frozenset()
        self.remembered: tuple[models.ComputeDomainNode, ...] | None = None
        """What the controller remembers of the last status it wrote (None: restarted)."""

    def step(self, nodes: Sequence[NodeInfo], agents: Sequence[Agent]) -> list[str]:
        """One round; returns the Event reasons, in the order they are recorded."""
        self.snap = dataclasses.replace(
            self.snap, nodes={n.name: n for n in nodes}, agents={a.node: a for a in agents}
        )
        plan = decide.plan(
            self.snap, limit=self.limit, reported=self.reported, remembered=self.remembered
        )
        if plan.status is not None:
            self.remembered = plan.members
        cliques = dict(self.snap.cliques)
        for clique, daemons in plan.cliques.items():
            if daemons:
                cliques[clique] = daemons
            else:
                cliques.pop(clique, None)
        shown = plan.status or self.snap.domain.status
        self.snap = dataclasses.replace(
            self.snap, cliques=cliques, domain=dataclasses.replace(self.snap.domain, status=shown)
        )
        self.reported = plan.reported
        return [str(e.reason) for e in (*plan.events, *plan.status_events)]


def test_event_story_of_a_domain() -> None:
    rounds = Rounds(limit=2)
    assert rounds.step([], []) == []
    a, b, c = node("a"), node("b"), node("c")
    assert rounds.step([a, b], [agent("a", R.STARTING), agent("b", R.STARTING)]) == [
        "MemberJoined",  # with their slots
    ]
    assert rounds.step([a, b], [agent("a", R.STARTING), agent("b", R.STARTING)]) == []
    assert rounds.step([a, b], [agent("a"), agent("b")]) == ["IMEXReady", "DomainReady"]
    assert rounds.step([a, b, c], [agent("a"), agent("b")]) == ["MemberJoined", "CliqueFull"]
    assert rounds.step([a, b, c], [agent("a"), agent("b")]) == []  # reported once
    failing = dataclasses.replace(agent("b", R.FAILED), detail="bind failed")
    assert rounds.step([a, b, c], [agent("a"), failing]) == ["IMEXFailed", "MemberLost"]
    assert rounds.step([a, b, c], [agent("a"), failing]) == []
    gone_b = node("b", domain="")
    assert rounds.step([a, gone_b, c], [agent("a"), agent("b", R.STOPPED)]) == [
        "SlotFreed", "SlotAssigned", "MemberLeft",
    ]  # fmt: skip
    # c's Node object is deleted: its slot goes at once, and a alone is a Ready domain.
    assert rounds.step([a, gone_b], [agent("a"), agent("b", R.STOPPED)]) == [
        "SlotFreed", "MemberLost", "DomainReady",
    ]  # fmt: skip


def test_a_restarted_controller_repeats_no_event() -> None:
    rounds = Rounds()
    members, agents = [node("a"), node("b")], [agent("a"), agent("b")]
    rounds.step(members, agents)
    rounds.reported = frozenset()  # a new process remembers nothing but the objects
    assert rounds.step(members, agents) == []


def shown(rounds: Rounds) -> dict[str, tuple[str, str]]:
    """Condition type → (status, reason) the domain shows after the last round."""
    stored = rounds.snap.domain.status
    assert isinstance(stored, models.ComputeDomainStatusV1Beta2)
    return {c.type: (c.status.value, c.reason) for c in stored.conditions}


def test_condition_story_of_a_domain() -> None:
    rounds = Rounds(limit=2)
    rounds.snap = dataclasses.replace(
        rounds.snap, domain=dataclasses.replace(rounds.snap.domain, num_nodes=2, generation=3)
    )
    rounds.step([], [])
    assert shown(rounds) == {"Ready": ("False", "NoMembers"), "Formed": ("False", "NoMembers"),
                             "Degraded": ("False", "NoMembers")}  # fmt: skip
    a, b, c = node("a"), node("b"), node("c")
    rounds.step([a], [agent("a")])
    assert shown(rounds) == {"Ready": ("False", "WaitingForNodes"),
                             "Formed": ("True", "AllDaemonsReady"),
                             "Degraded": ("False", "NotDegraded")}  # fmt: skip
    rounds.step([a, b], [agent("a"), agent("b", R.STARTING)])
    assert shown(rounds)["Ready"] == ("False", "NotFormed")
    assert shown(rounds)["Formed"] == ("False", "DaemonsNotReady")
    rounds.step([a, b], [agent("a"), agent("b")])
    ready = rounds.snap.domain.status
    assert ready is not None and ready.status is READY
    assert shown(rounds)["Ready"] == ("True", "AllNodesReady")
    assert {c.observed_generation for c in ready.conditions} == {3}
    assert ready.cliques == (models.CliqueSummary(id=C1, nodes=2, ready_nodes=2),)
    rounds.step([a, b, c], [agent("a"), agent("b")])  # c finds the clique full
    assert shown(rounds)["Formed"] == ("False", "CliqueFull")
    assert shown(rounds)["Degraded"] == ("False", "NotDegraded")  # nobody was lost
    rounds.step([a, b], [agent("a"), agent("b")])  # c left
    rounds.step([a, b], [agent("a"), agent("b", R.FAILED)])
    assert shown(rounds)["Degraded"] == ("True", "MembersLost")
    lost = rounds.snap.domain.status
    assert lost is not None and lost.status is NOT_READY
    assert rounds.step([a, b], [agent("a"), agent("b", R.FAILED)]) == []
    assert rounds.snap.domain.status is lost  # still Degraded, and no write for it
    rounds.step([a, b], [agent("a"), agent("b")])
    assert shown(rounds) == {"Ready": ("True", "AllNodesReady"),
                             "Formed": ("True", "AllDaemonsReady"),
                             "Degraded": ("False", "NotDegraded")}  # fmt: skip
    rounds.step([a], [agent("a")])  # b's Node is deleted: a alone is a formed domain
    assert shown(rounds)["Degraded"] == ("False", "NotDegraded")
    rounds.step([], [])
    assert shown(rounds)["Degraded"] == ("False", "NoMembers")


def test_transition_times_move_only_with_the_status() -> None:
    rounds = Rounds()
    rounds.step([node("a")], [agent("a", R.STARTING)])
    rounds.snap = dataclasses.replace(rounds.snap, now="2025-01-01T00:01:00Z")
    rounds.step([node("a"), node("b")], [agent("a", R.STARTING), agent("b", R.STARTING)])
    stored = rounds.snap.domain.status
    assert stored is not None
    times = {c.type: c.last_transition_time for c in stored.conditions}
    # Ready stayed False (its message changed): its transition is the first round's.
    assert times["Ready"] == "2025-01-01T00:00:00Z"
    rounds.step([node("a"), node("b")], [agent("a"), agent("b")])
    stored = rounds.snap.domain.status
    assert stored is not None
    assert {c.type: c.last_transition_time for c in stored.conditions}["Ready"] == (
        "2025-01-01T00:01:00Z"
    )


def test_a_large_domain_lists_a_bounded_number_of_nodes_those_not_ready_first() -> None:
    def member(i: int, state: models.Status) -> models.ComputeDomainNode:
        return models.ComputeDomainNode(
            name=f"n{i:04d}", ip_address="10.0.0.1", clique_id="c.1", index=i % 18, status=state
        )

    few = [member(i, READY) for i in range(3)]
    assert status.listed(few) == tuple(few)
    many = [member(i, READY if i != 900 else NOT_READY) for i in range(1000)]
    shown = status.listed(many)
    assert len(shown) == status.NODES_LISTED
    assert many[900] in shown  # the one holding the domain back is always there
    assert list(shown) == sorted(shown, key=lambda n: (n.clique_id, n.index, n.name))


def test_a_member_the_stored_list_leaves_out_is_still_seen_to_be_lost() -> None:
    rounds = Rounds(limit=18)
    nodes = [node(f"n{i:03d}", clique=CliqueID(f"rack-{i // 18}.1")) for i in range(300)]
    agents = [agent(n.name) for n in nodes]
    assert "DomainReady" in rounds.step(nodes, agents)
    stored = rounds.snap.domain.status
    assert stored is not None and len(stored.nodes) == status.NODES_LISTED
    assert stored.nodes_ready == "300/300"
    unlisted = next(n.name for n in nodes if n.name not in {m.name for m in stored.nodes})
    failing = [agent(a.node, R.FAILED) if a.node == unlisted else a for a in agents]
    events = rounds.step(nodes, failing)
    assert "MemberLost" in events and "MemberLeft" not in events, events
    assert shown(rounds)["Degraded"] == ("True", "MembersLost")
    after = rounds.snap.domain.status
    assert after is not None and unlisted in {m.name for m in after.nodes}  # not Ready: listed
    # A restarted controller remembers nothing: what the stored list leaves out is taken as
    # unchanged, so the same state announces nothing.
    rounds.remembered = None
    assert rounds.step(nodes, failing) == []
