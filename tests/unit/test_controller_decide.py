"""The controller's pure decisions: membership, slot release, clique contents, the plan."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, cast

import pytest

from computedomains.api import constants, imex, models
from computedomains.controller import conditions, decide, membership, trimmed
from computedomains.controller.views import (
    Agent,
    Claim,
    CliqueID,
    NodeInfo,
    NodeName,
    agent_of,
    pick_agent_pods,
)
from computedomains.kube import wire
from tests.support.snapshots import C1, C2, NOW, UID, agent, daemon, domain, node, snapshot

R = imex.Reason


@pytest.mark.parametrize(
    ("nodes", "agents", "expected"),
    [
        pytest.param([], [], True, id="node deleted"),
        pytest.param([node("a")], [agent("a", R.STARTING)], False, id="still a member"),
        pytest.param([node("a", clique=C2)], [agent("a")], True, id="moved clique"),
        pytest.param([node("a", clique="")], [agent("a")], False, id="clique label gone"),
        pytest.param([node("a", domain="")], [agent("a")], False, id="left, IMEX still ready"),
        pytest.param([node("a", domain="")], [agent("a", R.STARTING)], False, id="left, starting"),
        pytest.param([node("a", domain="")], [agent("a", R.FAILED)], False, id="left, failed"),
        pytest.param([node("a", domain="")], [agent("a", R.STOPPED)], True, id="left, stopped"),
        pytest.param([node("a", domain="")], [agent("a", R.IDLE, domain="")], True, id="idle"),
        pytest.param([node("a", domain="other")], [agent("a", domain="other")], True,
                     id="serves another domain"),
        pytest.param([node("a", domain="")], [], True, id="no agent pod"),
    ],
)  # fmt: skip
def test_may_free(nodes: list[NodeInfo], agents: list[Agent], expected: bool) -> None:
    snap = snapshot(nodes=nodes, agents=agents, cliques={C1: (daemon("a", 0),)})
    assert membership.may_free(snap, NodeName("a"), C1) is expected


def test_members_fill_their_cliques_with_agent_ips_and_readiness() -> None:
    snap = snapshot(
        nodes=[node("a"), node("b"), node("c", clique=C2), node("d", clique="")],
        agents=[agent("a", ip="10.1.0.1"), agent("b", R.STARTING, ip="10.1.0.2")],
    )
    result = membership.plan(snap, limit=18)
    assert result.daemons == {
        C1: (
            daemon("a", 0, ready=True, ip="10.1.0.1"),
            daemon("b", 1, ip="10.1.0.2"),
        ),
        C2: (daemon("c", 0, clique=C2),),
    }
    assert result.no_fabric == ("d",)


def test_a_member_whose_clique_label_vanished_keeps_its_slot() -> None:
    snap = snapshot(nodes=[node("a", clique=""), node("b")], cliques={C1: (daemon("a", 5),)})
    result = membership.plan(snap, limit=18)
    assert result.slots[C1].slots == {"a": 5, "b": 0}
    assert result.no_fabric == ()


def test_a_member_that_moved_cliques_leaves_the_old_one_and_joins_the_new() -> None:
    snap = snapshot(nodes=[node("a", clique=C2)], cliques={C1: (daemon("a", 3),)})
    result = membership.plan(snap, limit=18)
    assert result.daemons[C1] == ()
    assert result.slots[C1].freed == {"a": 3}
    assert result.slots[C2].assigned == {"a": 0}


def _desired(
    daemons: dict[CliqueID, tuple[models.CliqueDaemon, ...]],
    members: dict[CliqueID, frozenset[str]] | None = None,
) -> membership.CliquesPlan:
    return membership.CliquesPlan(
        slots={}, daemons=daemons, no_fabric=(), clique_of={}, members=members or {}
    )


def test_an_empty_clique_is_deleted_and_an_unchanged_one_not_written() -> None:
    a = node("a")
    current = snapshot(nodes=[a], cliques={C1: (daemon("a", 0),), C2: (daemon("b", 0, clique=C2),)})
    desired = _desired({C1: (daemon("a", 0),), C2: ()}, {C1: frozenset("a")})
    assert membership.changed(current, desired) == {C2: ()}
    assert membership.changed(snapshot(nodes=[a], cliques={C1: ()}), _desired({})) == {C1: ()}
    assert membership.changed(snapshot(), _desired({C1: ()})) == {}


def test_a_held_node_is_named_a_member_and_a_leaving_one_is_not() -> None:
    reserved = node("a", domain="", claim=Claim.HELD)
    left = node("b", domain="", claim=Claim.NONE)
    snap = snapshot(nodes=[reserved, left], agents=[agent("b")], cliques={C1: (daemon("b", 0),)})
    result = membership.plan(snap, limit=18)
    assert result.slots[C1].slots == {"a": 1, "b": 0}  # b keeps its slot until its agent lets go
    assert result.members[C1] == frozenset({"a"})
    planned = decide.plan(snap, limit=18, reported=frozenset())
    assert planned.clique_members == {C1: frozenset({"a"})}


def test_only_the_members_named_changing_is_written_and_agents_need_it_now() -> None:
    a = node("a")
    listed = {C1: (daemon("a", 0, ready=True, ip="10.0.0.1"),)}
    snap = snapshot(nodes=[a], agents=[agent("a", ip="10.0.0.1")], cliques=listed)
    assert not decide.plan(snap, limit=18, reported=frozenset()).cliques
    unnamed = dataclasses.replace(snap, clique_members={C1: None})  # written by an older release
    planned = decide.plan(unnamed, limit=18, reported=frozenset(), flush=False)
    assert planned.cliques == listed
    assert planned.clique_members == {C1: frozenset({"a"})}


def ready_status(ip: str) -> models.ComputeDomainStatusV1Beta2:
    """What the domain shows with node a ready in slot 0."""
    nodes = (models.ComputeDomainNode(name="a", ip_address=ip, clique_id=C1, index=0,
                                      status=models.Status.READY),)  # fmt: skip
    return models.ComputeDomainStatusV1Beta2(
        status=models.Status.READY,
        nodes=nodes,
        nodes_ready="1/1",
        conditions=conditions.compute(
            nodes,
            num_nodes=0,
            placement=models.CliquePlacement.NONE,
            generation=0,
            previous=None,
            existing_nodes={"a"},
            now=NOW,
        ),
        cliques=(models.CliqueSummary(id=C1, nodes=1, ready_nodes=1),),
    )


def test_an_idle_domain_plans_no_write() -> None:
    snap = snapshot(
        dom=domain(status=ready_status("10.1.0.1")),
        nodes=[node("a")],
        agents=[agent("a", ip="10.1.0.1")],
        cliques={C1: (daemon("a", 0, ready=True, ip="10.1.0.1"),)},
    )
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert not plan.writes
    assert plan.domain_ready


def test_a_new_domain_gets_its_finalizer_template_and_status() -> None:
    plan = decide.plan(
        snapshot(dom=domain(finalized=False), template=False), limit=18, reported=frozenset()
    )
    assert plan.add_finalizer
    assert plan.create_template
    no_members = [
        models.Condition(type=t, status=models.ConditionStatus.FALSE, reason="NoMembers",
                         message=m, observed_generation=0, last_transition_time=NOW)
        for t, m in [("Ready", "no node has joined: no pod of the domain runs"),
                     ("Formed", "no node has joined: no pod of the domain runs"),
                     ("Degraded", "no node has joined")]
    ]  # fmt: skip
    assert plan.status == models.ComputeDomainStatusV1Beta2(
        status=models.Status.NOT_READY, nodes=(), nodes_ready="0/0", conditions=tuple(no_members)
    )
    assert plan.events == plan.status_events == ()  # nothing to tell before a node joins


def test_formation_in_one_round_assigns_and_writes_each_clique_once() -> None:
    members = [node(f"n{i:02d}") for i in range(18)]
    plan = decide.plan(snapshot(nodes=members), limit=18, reported=frozenset())
    assert set(plan.cliques) == {C1}
    assert sorted(d.index for d in plan.cliques[C1] if d.index is not None) == list(range(18))
    assert len(plan.assigned) == 18
    assert plan.status is not None
    assert plan.status.nodes_ready == "0/18"


def test_deletion_waits_while_nodes_hold_the_domain() -> None:
    snap = snapshot(
        dom=domain(deleting=True, status=ready_status(agent("a").ip)), nodes=[node("a")],
        agents=[agent("a")],
        cliques={C1: (daemon("a", 0, ready=True, ip=agent("a").ip),)},
    )  # fmt: skip
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.delete_template
    assert not plan.create_template
    assert plan.holding_nodes == ("a",)
    assert not plan.remove_finalizer
    assert plan.cliques == {}
    assert [e.reason for e in plan.events] == ["DeletionWaiting"]
    assert plan.status_events == ()
    again = decide.plan(snap, limit=18, reported=plan.reported)
    assert again.events == ()  # reported once


def test_deletion_releases_once_no_node_holds_it_even_with_slots_unconfirmed() -> None:
    snap = snapshot(
        dom=domain(deleting=True),
        nodes=[node("a", domain="")],
        agents=[agent("a")],  # still says READY for the domain
        cliques={C1: (daemon("a", 0, ready=True),)},
        template=False,
    )
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.remove_finalizer
    assert plan.cliques == {C1: ()}
    assert plan.status is None


CONTAINER_START = "2026-01-01T00:00:10Z"
"""The agent container's ``startedAt``: whole seconds, as the kubelet writes it."""
RUN = imex.AgentStart(
    "pod-uid", "run-2", datetime.datetime(2026, 1, 1, 0, 0, 10, 400, datetime.UTC)
)
"""The run of the agent in that container (it starts a little after the container)."""
EARLIER_RUN = imex.AgentStart(
    "pod-uid", "run-1", datetime.datetime(2026, 1, 1, 0, 0, 3, 0, datetime.UTC)
)
"""The run before a crash."""
RUNNING = {"running": {"startedAt": CONTAINER_START}}
BACKING_OFF = {"waiting": {"reason": "CrashLoopBackOff"}}


def _agent_pod(
    *, status: str = "True", reason: str = "Ready", domain: str | None = UID,
    run: imex.AgentStart | None = RUN, state: dict[str, Any] | None = RUNNING,
    container: str = imex.AGENT_CONTAINER,
) -> dict[str, Any]:  # fmt: skip
    """An agent pod as the API serves it, its report written by ``run``."""
    annotations = {} if domain is None else {imex.DOMAIN_ANNOTATION: domain}
    if run is not None:
        annotations[imex.START_ANNOTATION] = run.annotation()
    containers = [] if state is None else [{"name": container, "state": state}]
    return {
        "metadata": {"name": "agent", "uid": "pod-uid", "annotations": annotations},
        "spec": {"nodeName": "a"},
        "status": {
            "podIP": "10.2.0.1",
            "containerStatuses": containers,
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": constants.IMEX_READY_CONDITION, "status": status, "reason": reason,
                 "message": f"domain {UID}: some text"},
            ],
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "ready", "domain"),
    [
        pytest.param(_agent_pod(), True, UID, id="running, written by this run"),
        pytest.param(_agent_pod(status="False", reason="Starting"), False, UID, id="starting"),
        pytest.param(_agent_pod(state=BACKING_OFF), False, UID, id="container down after a crash"),
        pytest.param(_agent_pod(state=None), False, UID, id="no container status"),
        pytest.param(_agent_pod(container="other"), False, UID, id="another container runs"),
        pytest.param(_agent_pod(run=EARLIER_RUN), False, UID, id="restarted, not reported yet"),
        pytest.param(_agent_pod(run=None), False, UID, id="no start annotation"),
        pytest.param(_agent_pod(domain=None), False, "", id="no domain annotation"),
        pytest.param(_agent_pod(domain="other"), False, "other", id="ready for another domain"),
    ],
)  # fmt: skip
def test_an_agent_is_ready_only_as_reported_by_its_running_container(
    pod: dict[str, Any], ready: bool, domain: str
) -> None:
    parsed = agent_of(cast(wire.Pod, pod))
    assert (parsed.node, parsed.ip, parsed.domain) == ("a", "10.2.0.1", domain)
    assert parsed.ready_for(UID) is ready


def test_the_domain_comes_from_the_annotation_never_from_the_message() -> None:
    pod = _agent_pod(status="False", reason="Failed", domain="")
    pod["status"]["conditions"][1]["message"] = (
        f"domain {UID}: bind: cannot assign requested address"
    )
    parsed = agent_of(cast(wire.Pod, pod))
    assert parsed.domain == "" and not parsed.failed_for(UID) and parsed.released(UID)
    failed = agent_of(cast(wire.Pod, _agent_pod(status="False", reason="Failed")))
    assert failed.failed_for(UID) and not failed.released(UID)
    assert failed.detail == f"domain {UID}: some text"
    assert not agent_of({"spec": {"nodeName": "a"}}).ready_for(UID)


def _legacy_pod(reason: str, probed: str) -> dict[str, Any]:
    """An agent pod of chart 0.1.0 from before the annotations: a condition, nothing else."""
    pod = _agent_pod(status="True" if reason == "Ready" else "False", reason=reason, domain=None,
                     run=None)  # fmt: skip
    pod["status"]["conditions"][1]["lastProbeTime"] = probed
    return pod


def test_a_legacy_agent_is_read_against_its_nodes_label_and_releases_only_when_stopped() -> None:
    after_start, before_start = "2026-01-01T00:00:19Z", "2026-01-01T00:00:01Z"
    ready = agent_of(cast(wire.Pod, _legacy_pod("Ready", after_start)), node_domain=UID)
    assert ready.legacy and ready.domain == UID and ready.ready_for(UID)
    assert not ready.released(UID)
    stale = agent_of(cast(wire.Pod, _legacy_pod("Ready", before_start)), node_domain=UID)
    assert not stale.ready_for(UID), "probed before the running container started"
    moved = agent_of(cast(wire.Pod, _legacy_pod("Ready", after_start)), node_domain="other")
    assert not moved.ready_for(UID) and not moved.released(UID), "may still serve UID"
    for reason in ("Stopped", "Idle"):
        stopped = agent_of(cast(wire.Pod, _legacy_pod(reason, after_start)), node_domain=UID)
        assert stopped.released(UID) and stopped.domain == ""
    failed = agent_of(cast(wire.Pod, _legacy_pod("Failed", after_start)), node_domain=UID)
    assert failed.failed_for(UID) and not failed.released(UID)


def test_the_agent_cache_keeps_what_the_agent_view_reads() -> None:
    pod = _agent_pod()
    pod["metadata"]["annotations"]["someone.else/big"] = "x" * 1000
    pod["status"]["containerStatuses"].append({"name": "sidecar", "state": RUNNING})
    kept = trimmed.pod(pod)
    assert agent_of(cast(wire.Pod, kept)) == agent_of(cast(wire.Pod, pod))
    assert agent_of(cast(wire.Pod, kept)).ready_for(UID)
    assert set(kept["metadata"]["annotations"]) == {
        imex.DOMAIN_ANNOTATION,
        imex.START_ANNOTATION,
    }
    assert [c["name"] for c in kept["status"]["containerStatuses"]] == [imex.AGENT_CONTAINER]


def test_the_live_newest_agent_pod_speaks_for_its_node() -> None:
    def pod(name: str, created: str, deleting: bool = False) -> wire.Pod:
        meta: wire.ObjectMeta = {"name": name, "creationTimestamp": created}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:09Z"
        return {"metadata": meta, "spec": {"nodeName": "a"}}

    chosen = pick_agent_pods([
        pod("old", "2026-01-01T00:00:01Z"),
        pod("newest-terminating", "2026-01-01T00:00:03Z", deleting=True),
        pod("new", "2026-01-01T00:00:02Z"),
    ])  # fmt: skip
    assert chosen[NodeName("a")]["metadata"]["name"] == "new"


def test_between_status_writes_only_what_agents_wait_for_is_written() -> None:
    members = [node("a"), node("b")]
    held = decide.plan(snapshot(nodes=members), limit=18, reported=frozenset(), flush=False)
    assert set(held.cliques) == {C1}  # slots: written at once
    assert held.status is None
    assert held.events == held.status_events == ()
    assert held.deferred
    assert held.assigned == ("a", "b")

    # Only readiness changed: nothing is written until the next status write.
    stored = {C1: (daemon("a", 0, ip=agent("a").ip), daemon("b", 1, ip=agent("b").ip))}
    ready = snapshot(nodes=members, agents=[agent("a"), agent("b")], cliques=stored)
    held = decide.plan(ready, limit=18, reported=frozenset(), flush=False)
    assert held.cliques == {}
    assert held.deferred
    assert held.became_ready == ("a", "b")  # latency is measured when seen, not when written
    assert held.announced_ready == ()  # the status that shows it is not written yet
    flushed = decide.plan(ready, limit=18, reported=frozenset(), flush=True)
    assert flushed.announced_ready == ("a", "b")
    assert {d.status for d in flushed.cliques[C1]} == {models.Status.READY}
    assert flushed.status is not None
    assert [e.reason for e in flushed.status_events] == [
        "MemberJoined", "IMEXReady", "DomainReady",
    ]  # fmt: skip
    assert (
        flushed.status_events[0].message
        == f"2 nodes joined: a (slot 0 in {C1}), b (slot 1 in {C1})"
    )
    assert not flushed.deferred


def test_a_forged_label_is_warned_about_in_the_round_that_takes_it_away() -> None:
    # Label writes are never held back, so a round between status writes removes the forged
    # label; its warning cannot wait for the next status write, which would no longer see it.
    stored = {C1: (daemon("a", 0, ip=agent("a").ip),)}
    forged = node("b", claim=Claim.NONE)
    snap = snapshot(nodes=[node("a"), forged], agents=[agent("a", R.STARTING)], cliques=stored)
    held = decide.plan(snap, limit=18, reported=frozenset(), flush=False)
    assert [(w.node, w.value) for w in held.labels] == [("b", "")]
    assert [e.reason for e in held.status_events] == ["NodeLabelWithoutClaim"]
    assert held.status_events[0].message.startswith("b carry")
    flushed = decide.plan(snap, limit=18, reported=held.reported, flush=True)
    assert "NodeLabelWithoutClaim" not in {e.reason for e in flushed.status_events}  # once
    # Taken away and forged again, between status writes both times: warned about again.
    gone = snapshot(nodes=[node("a")], agents=[agent("a", R.STARTING)], cliques=stored)
    after = decide.plan(gone, limit=18, reported=held.reported, flush=False)
    again = decide.plan(snap, limit=18, reported=after.reported, flush=False)
    assert [e.reason for e in again.status_events] == ["NodeLabelWithoutClaim"]


def test_an_address_change_is_written_at_once() -> None:
    stored = {C1: (daemon("a", 0, ip="10.9.9.9"),)}
    held = decide.plan(
        snapshot(nodes=[node("a")], agents=[agent("a", R.STARTING)], cliques=stored),
        limit=18, reported=frozenset(), flush=False,
    )  # fmt: skip
    assert held.cliques[C1][0].ip_address == agent("a").ip


def test_readiness_a_clique_shows_early_is_announced_with_the_status_write() -> None:
    # An urgent clique write (members named) carried the READY along before the status.
    stored = {C1: (daemon("a", 0, ready=True, ip=agent("a").ip),)}
    snap = snapshot(nodes=[node("a")], agents=[agent("a")], cliques=stored)
    flushed = decide.plan(snap, limit=18, reported=frozenset(), flush=True)
    assert flushed.became_ready == ()
    assert flushed.status is not None
    assert flushed.announced_ready == ("a",)
    shown = dataclasses.replace(
        snap, domain=dataclasses.replace(snap.domain, status=flushed.status)
    )
    assert decide.plan(shown, limit=18, reported=frozenset()).announced_ready == ()
