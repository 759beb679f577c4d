"""Roll-agents' plan (hooks/rollplan.py) and verify's view of an OnDelete DaemonSet."""

from __future__ import annotations

import pytest

from computedomains.hooks import daemonsetpods, rollplan
from computedomains.hooks import fabricreport as fr
from computedomains.hooks.report import Severity


def _pod(node: str, *, outdated: bool = True) -> rollplan.AgentPod:
    return rollplan.AgentPod(f"agent-{node}", f"uid-{node}", node, outdated, "0.1.0")


def _hold(node: str, clique: str, **held: str) -> rollplan.NodeHold:
    return rollplan.NodeHold(node, clique, **held)


def test_idle_nodes_roll_clique_by_clique_and_held_ones_stay() -> None:
    pods = [_pod("a2"), _pod("b1"), _pod("a1"), _pod("a3"), _pod("b2"), _pod("c1"),
            _pod("a4", outdated=False), _pod("gone")]  # fmt: skip
    holds = {
        "a1": _hold("a1", "r.a"),
        "a2": _hold("a2", "r.a", holder="d1"),
        "a3": _hold("a3", "r.a", holder="d2"),
        "a4": _hold("a4", "r.a"),
        "b1": _hold("b1", "r.b", holder="d1"),
        "b2": _hold("b2", "r.b"),
        "c1": _hold("c1", ""),
    }
    plan = rollplan.plan(pods, holds)
    assert [(w.clique, [p.node for p in w.pods]) for w in plan.waves] == [
        ("", ["c1"]),
        ("r.a", ["a1"]),
        ("r.b", ["b2"]),
    ]
    assert [(p.node, d) for p, d in plan.held] == [("a2", "d1"), ("a3", "d2"), ("b1", "d1")]
    assert (plan.current, plan.outdated) == (1, 6), "a pod on a vanished node is left alone"


def test_a_node_taken_before_its_wave_is_kept() -> None:
    pod = _pod("a1")
    assert rollplan.still_idle(pod, {"a1": _hold("a1", "r.a")})
    assert not rollplan.still_idle(pod, {"a1": _hold("a1", "r.a", holder="d3")})
    assert not rollplan.still_idle(pod, {})


@pytest.mark.parametrize(
    ("version", "current", "ok"),
    [("0.1.0", "0.2.0", True), ("0.2.0", "0.2.0", True), ("0.2.1", "0.2.0", True),
     ("0.0.9", "0.2.0", False), ("0.3.0", "0.2.0", False), ("1.1.0", "0.2.0", False),
     ("", "0.2.0", False), ("v0.1.0", "0.2.0", True)],
)  # fmt: skip
def test_agents_of_this_release_line_and_the_one_before_are_supported(
    version: str, current: str, ok: bool
) -> None:
    assert fr.supported_skew(version, current) is ok


def test_an_on_delete_daemonset_passes_with_previous_agents_and_names_their_nodes() -> None:
    previous = (fr.PodVersion("n2", "0.1.0"), fr.PodVersion("n1", "0.1.0"))
    agent = fr.Component("DaemonSet", "agent", 3, 3, 1, on_delete=True, previous=previous)
    assert agent.settled
    (finding,) = fr.check_components([agent], current="0.2.0", roll_hint="run it")
    assert finding.severity is Severity.WARN
    assert "2 node(s) still run version 0.1.0" in finding.message and "n1, n2" in finding.message
    assert "run it" in finding.fix
    (current,) = fr.check_components(
        [fr.Component("DaemonSet", "agent", 3, 3, 3, on_delete=True)], current="0.2.0"
    )
    assert current.severity is Severity.OK


def test_an_on_delete_daemonset_fails_unready_or_with_unsupported_versions() -> None:
    unready = fr.Component("DaemonSet", "agent", 3, 2, 0, on_delete=True)
    assert not unready.settled
    assert fr.check_components([unready], current="0.2.0")[0].severity is Severity.FAIL
    old = fr.Component("DaemonSet", "agent", 1, 1, 0, on_delete=True,
                       previous=(fr.PodVersion("n1", "0.0.3"),))  # fmt: skip
    (finding,) = fr.check_components([old], current="0.2.0")
    assert finding.severity is Severity.FAIL and "n1 (0.0.3)" in finding.message
    rolling = fr.Component("DaemonSet", "plugin", 3, 3, 1)
    assert not rolling.settled, "a RollingUpdate DaemonSet still waits for every pod"


def test_an_idle_node_that_is_not_ready_is_left_for_later() -> None:
    plan = rollplan.plan([_pod("a1")], {"a1": _hold("a1", "r.a", ready=False)})
    assert plan.waves == () and [p.node for p in plan.unready] == ["a1"]
    assert not rollplan.still_idle(_pod("a1"), {"a1": _hold("a1", "r.a", ready=False)})


def _ds_pod(uid: str, generation: str, revision: str) -> dict[str, object]:
    labels = {
        daemonsetpods.TEMPLATE_GENERATION_LABEL: generation,
        daemonsetpods.REVISION_HASH_LABEL: revision,
    }
    return {"metadata": {"uid": uid, "labels": labels}}


def test_current_pods_by_generation_or_by_the_current_templates_hash() -> None:
    ds = {"metadata": {"annotations": {daemonsetpods.TEMPLATE_GENERATION_ANNOTATION: "5"}}}
    pods = [
        _ds_pod("new", "5", "h-old"),  # rolled back: generation 5 has the old template again
        _ds_pod("kept", "3", "h-old"),  # made from that template before: current too
        _ds_pod("other", "4", "h-mid"),
    ]
    assert daemonsetpods.current_pods(pods, ds) == {"new", "kept"}
    assert daemonsetpods.current_pods(pods, {"metadata": {}}) == set()
