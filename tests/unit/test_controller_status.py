"""Status aggregation and Event planning of a ComputeDomain, as tables and as rounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from computedomains.api import imex, models
from computedomains.controller import decide, membership, status
from computedomains.controller.views import Agent, CliqueID, NodeInfo, Snapshot
from tests.support.snapshots import C1, C2, agent, daemon, domain, node, snapshot

R = imex.Reason
READY, NOT_READY = models.Status.READY, models.Status.NOT_READY
REQUIRED, PREFERRED = models.CliquePlacement.REQUIRED, models.CliquePlacement.PREFERRED
NO_PLACEMENT = models.CliquePlacement.NONE


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


def degraded(result: models.ComputeDomainStatusV1Beta2) -> models.Condition:
    """The Degraded condition of ``result``."""
    return next(c for c in result.conditions if c.type == "Degraded")


SPREAD = [node("a"), node("b"), node("c", clique=C2)]
"""Two members in C1, one in C2 (admitted while the webhook was down)."""


@pytest.mark.parametrize(
    ("placement", "nodes", "agents", "told"),
    [
        pytest.param(REQUIRED, SPREAD, [agent("a"), agent("b"), agent("c")],
                     ("True", "SpansCliques", True), id="Required, spread, formed"),
        pytest.param(REQUIRED, SPREAD, [agent("a"), agent("b"), agent("c", R.STARTING)],
                     ("True", "SpansCliques", True), id="Required, spread, forming"),
        pytest.param(PREFERRED, SPREAD, [agent("a"), agent("b"), agent("c")],
                     ("False", "NotDegraded", False), id="Preferred may spread"),
        pytest.param(NO_PLACEMENT, SPREAD, [agent("a"), agent("b"), agent("c")],
                     ("False", "NotDegraded", False), id="None asks for nothing"),
        pytest.param(REQUIRED, [node("a"), node("b")], [agent("a"), agent("b")],
                     ("False", "NotDegraded", False), id="Required, one clique"),
        pytest.param(REQUIRED, [node("a"), node("z", clique="")], [agent("a")],
                     ("False", "NotDegraded", False), id="a member without a fabric is in none"),
        pytest.param(REQUIRED, [], [], ("False", "NoMembers", False), id="Required, no members"),
    ],
)  # fmt: skip
def test_a_required_domain_spanning_cliques_is_degraded_and_warned_of(
    placement: models.CliquePlacement,
    nodes: list[NodeInfo],
    agents: list[Agent],
    told: tuple[str, str, bool],
) -> None:
    snap = snapshot(dom=domain(clique=placement), nodes=nodes, agents=agents)
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.status is not None
    condition = degraded(plan.status)
    warnings = [e for e in plan.status_events if e.reason == "SpansCliques"]
    assert (condition.status.value, condition.reason, bool(warnings)) == told
    if told[2]:
        assert [w.warning for w in warnings] == [True]
        assert warnings[0].message == condition.message


def test_the_spread_message_names_the_cliques_their_members_and_the_likely_cause() -> None:
    snap = snapshot(dom=domain(clique=REQUIRED), nodes=SPREAD,
                    agents=[agent("a"), agent("b"), agent("c")])  # fmt: skip
    assert degraded(aggregate(snap)).message == (
        "members span 2 cliques though spec.placement.clique is Required: rack-1.32766 "
        "(2 nodes), rack-2.32766 (1 node); the pods on the members outside rack-1.32766 (the "
        "clique most members share), c, were most likely admitted while the admission webhook "
        "was down, so they got no clique affinity"
    )


def message(rounds: Rounds) -> str:
    """The Degraded condition's message the domain shows after the last round."""
    stored = rounds.snap.domain.status
    assert isinstance(stored, models.ComputeDomainStatusV1Beta2)
    return degraded(stored).message


def test_spanning_story_of_a_required_domain() -> None:
    rounds = Rounds()
    rounds.snap = dataclasses.replace(rounds.snap, domain=domain(clique=REQUIRED))
    a, b, c, d = node("a"), node("b"), node("c", clique=C2), node("d", clique=C2)
    ready = {n: agent(n) for n in "abcd"}
    assert "SpansCliques" not in rounds.step([a, b], [ready["a"], ready["b"]])
    assert shown(rounds)["Degraded"] == ("False", "NotDegraded")
    # c's pod was admitted while the webhook was down: it landed in C2.
    assert "SpansCliques" in rounds.step([a, b, c], [ready["a"], ready["b"], ready["c"]])
    assert shown(rounds)["Degraded"] == ("True", "SpansCliques")
    assert shown(rounds)["Ready"] == ("True", "AllNodesReady")
    assert rounds.step([a, b, c], [ready["a"], ready["b"], ready["c"]]) == []  # told once
    # Another in the same clique: the condition counts it, the Warning is not repeated.
    assert "SpansCliques" not in rounds.step([a, b, c, d], list(ready.values()))
    assert "rack-2.32766 (2 nodes)" in message(rounds)
    # A member lost while spread: MembersLost wins the reason, the message tells both.
    failing = [ready["a"], agent("b", R.FAILED), ready["c"], ready["d"]]
    rounds.step([a, b, c, d], failing)
    assert shown(rounds)["Degraded"] == ("True", "MembersLost")
    assert message(rounds).startswith("IMEX no longer ready on b; members span 2 cliques")
    # d leaves while b is still lost: MembersLost is kept, the spread told as it is now, once.
    gone_d = node("d", clique=C2, domain="")
    rounds.step([a, b, c, gone_d], [ready["a"], agent("b", R.FAILED), ready["c"]])
    assert shown(rounds)["Degraded"] == ("True", "MembersLost")
    assert message(rounds).startswith("IMEX no longer ready on b; members span 2 cliques")
    assert "rack-2.32766 (1 node)" in message(rounds)
    assert message(rounds).count("members span") == 1
    rounds.step([a, b, c], [ready["a"], ready["b"], ready["c"]])  # Formed again
    assert shown(rounds)["Degraded"] == ("True", "SpansCliques")
    gone_c = node("c", clique=C2, domain="")
    rounds.step([a, b, gone_c], [ready["a"], ready["b"], agent("c", R.STOPPED)])  # c left
    assert shown(rounds)["Degraded"] == ("False", "NotDegraded")
    # Spread again later: told again.
    assert "SpansCliques" in rounds.step([a, b, c], [ready["a"], ready["b"], ready["c"]])
