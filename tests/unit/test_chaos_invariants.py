"""The chaos run's invariants over hand-made snapshots: one that holds, one that breaks each."""

from __future__ import annotations

import dataclasses

import pytest

from cdsim.chaos import invariants, report
from cdsim.chaos.invariants import Bounds, Context, Violation, Window
from cdsim.chaos.snapshot import (
    Claim,
    Clique,
    Component,
    Container,
    Daemon,
    Domain,
    Entry,
    Member,
    Node,
    NodeFiles,
    Pod,
    Snapshot,
    Spec,
    Template,
)

NS = "chaos-1-t0"
KEY = f"{NS}/d000"
UID, OTHER = "uid-a", "uid-b"
POD = f"{NS}/d000-p0"
DONE = invariants.COMPLETED


def snap(at: float = 100.0, **changes: object) -> Snapshot:
    """One domain with one pod on n1, everything in place; ``changes`` replace fields."""
    whole = Snapshot(
        at=at,
        domains=(Domain(NS, "d000", UID, ready=True, members=(Member("n1", True, 0, "c0"),)),),
        pods=(Pod(NS, "d000-p0", "pu0", "d000", "n1", "Running", ("c0",)),),
        claims=(Claim(NS, "c0", "cu0", UID, "n1", ("channel-0",), ("pu0",)),),
        cliques=(Clique(f"{UID}.c0", UID, "c0", (Daemon("n1", 0, True),), ("n1",)),),
        templates=(Template(NS, "d000-channel", UID),),
        nodes=(
            Node("n1", ready=True, domain_label=UID, held_for=(UID,)),
            Node("n2", ready=True),
        ),
        files=(
            NodeFiles("n1", (Spec("cu0", UID),), (Entry("cu0", UID, DONE),), True, UID, "READY"),
            NodeFiles("n2"),
        ),
        components=(
            Component(
                "plugin-n1", "kubelet-plugin", "n1", True, (Container("kubelet-plugin", True),)
            ),
            Component("agent-n1", "imex-agent", "n1", True, (Container("imex-agent", True),)),
            Component(
                "plugin-n2", "kubelet-plugin", "n2", True, (Container("kubelet-plugin", True),)
            ),
            Component("controller-x", "controller", "n2", True, (Container("controller", True),)),
        ),
        leader="controller-x",
    )
    return dataclasses.replace(whole, **changes)


CTX = Context(expected={KEY: 1}, changed={KEY: 0.0})


def keys(found: list[Violation]) -> list[str]:
    return sorted(v.key for v in found)


def with_files(now: Snapshot, node: str, **changes: object) -> Snapshot:
    files = tuple(dataclasses.replace(f, **changes) if f.node == node else f for f in now.files)
    return dataclasses.replace(now, files=files)


def test_a_whole_cluster_breaks_nothing_and_is_healthy() -> None:
    assert invariants.check(snap(97.0), snap(), CTX) == []
    assert invariants.check(None, snap(), CTX) == []
    assert invariants.healthy(snap(), CTX)


# -- a running pod keeps its channel ---------------------------------------------------------


def test_a_pod_that_vanishes_unasked_is_lost_and_one_the_run_deleted_is_not() -> None:
    gone = snap(pods=())
    assert keys(invariants.channels_kept(snap(97.0), gone, CTX)) == [f"pod-lost:{POD}"]
    asked = dataclasses.replace(CTX, removed=frozenset({POD}))
    assert invariants.channels_kept(snap(97.0), gone, asked) == []


def test_a_pod_that_stops_running_or_comes_back_as_another_is_lost() -> None:
    failed = snap(pods=(Pod(NS, "d000-p0", "pu0", "d000", "n1", "Failed", ("c0",)),))
    (violation,) = invariants.channels_kept(snap(97.0), failed, CTX)
    assert violation.invariant == "pod-lost" and "is Failed now" in violation.message
    again = snap(pods=(Pod(NS, "d000-p0", "pu9", "d000", "n1", "Running", ("c0",)),))
    assert f"pod-lost:{POD}" in keys(invariants.channels_kept(snap(97.0), again, CTX))


def test_a_running_pod_whose_claim_changes_loses_its_channel() -> None:
    moved = snap(claims=(Claim(NS, "c0", "cu0", UID, "n1", ("channel-0-s1",), ("pu0",)),))
    assert "channel-lost:" + POD in keys(invariants.channels_kept(snap(97.0), moved, CTX))


def test_a_running_pod_needs_its_cdi_spec_and_completed_entry_for_a_moment_only() -> None:
    no_spec = with_files(snap(), "n1", specs=())
    (violation,) = invariants.channels_kept(snap(97.0), no_spec, CTX)
    assert violation.key == f"channel-lost:{POD}:cdi"
    assert violation.hold == CTX.bounds.settle
    started = with_files(snap(), "n1", checkpoint=(Entry("cu0", UID, "PrepareStarted"),))
    (violation,) = invariants.channels_kept(snap(97.0), started, CTX)
    assert "has PrepareStarted" in violation.message
    unreadable = with_files(snap(), "n1", checkpoint=None)  # torn, or being rebuilt
    assert invariants.channels_kept(snap(97.0), unreadable, CTX) == []


def test_a_pod_on_a_node_whose_fabric_failed_is_exempt() -> None:
    gone = with_files(snap(pods=()), "n1", specs=())
    failed = Window("degrade-fabric", "n1", 50.0, None, breaks_fabric=True)
    ctx = dataclasses.replace(CTX, windows=(failed,))
    exempt = invariants.fabric_exempt(snap(97.0), ctx)
    assert exempt == {POD}
    assert (
        invariants.channels_kept(
            snap(97.0), gone, dataclasses.replace(ctx, exempt=frozenset(exempt))
        )
        == []
    )
    degraded = dataclasses.replace(failed, breaks_fabric=False)
    assert (
        invariants.fabric_exempt(snap(97.0), dataclasses.replace(CTX, windows=(degraded,))) == set()
    )
    long_ago = dataclasses.replace(failed, end=10.0)
    assert (
        invariants.fabric_exempt(snap(97.0), dataclasses.replace(CTX, windows=(long_ago,))) == set()
    )


# -- ... and its node's IMEX -----------------------------------------------------------------


def test_a_pods_node_must_stay_a_member_labelled_for_its_domain() -> None:
    dropped = snap(cliques=(Clique(f"{UID}.c0", UID, "c0", (Daemon("n1", 0, True),), ()),))
    (violation,) = invariants.imex_kept(snap(97.0), dropped, CTX)
    assert violation.key == f"imex-lost:{KEY}@n1:member" and violation.hold > 0
    relabelled = snap(nodes=(Node("n1", True, domain_label=OTHER), Node("n2", True)))
    (violation,) = invariants.imex_kept(snap(97.0), relabelled, CTX)
    assert violation.key == f"imex-lost:{KEY}@n1:label"


def test_a_slot_never_moves_under_a_running_pod() -> None:
    moved = snap(cliques=(Clique(f"{UID}.c0", UID, "c0", (Daemon("n1", 3, True),), ("n1",)),))
    (violation,) = invariants.imex_kept(snap(97.0), moved, CTX)
    assert violation.key == f"slot-moved:{KEY}@n1" and violation.hold == 0
    assert "from [0] to [3]" in violation.message


def test_imex_must_run_ready_for_the_domain_outside_a_fault_on_its_node() -> None:
    dead = with_files(snap(), "n1", imex_running=False)
    (violation,) = invariants.imex_kept(snap(97.0), dead, CTX)
    assert violation.key == f"imex-lost:{KEY}@n1:imex"
    assert violation.hold == CTX.bounds.imex and "not running" in violation.message
    elsewhere = with_files(snap(), "n1", imex_domain=OTHER)
    assert "READY for uid-b" in invariants.imex_kept(snap(97.0), elsewhere, CTX)[0].message
    killed = dataclasses.replace(CTX, windows=(Window("hang-imex", "n1", 90.0, None),))
    assert invariants.imex_kept(snap(97.0), dead, killed) == []
    paused = dataclasses.replace(CTX, windows=(Window("pause-etcd", "", 90.0, None),))
    assert invariants.imex_kept(snap(97.0), dead, paused) == []
    other_node = dataclasses.replace(CTX, windows=(Window("hang-imex", "n2", 90.0, None),))
    assert invariants.imex_kept(snap(97.0), dead, other_node) != []


def test_a_pod_is_judged_only_once_it_ran_from_one_snapshot_to_the_next() -> None:
    starting = snap(97.0, pods=(Pod(NS, "d000-p0", "pu0", "d000", "n1", "Pending", ("c0",)),))
    dead = with_files(snap(), "n1", imex_running=False)
    assert invariants.imex_kept(starting, dead, CTX) == []


# -- nothing is held twice -------------------------------------------------------------------


def test_a_device_allocated_to_two_claims_is_held_twice() -> None:
    twice = snap(claims=(*snap().claims, Claim("other", "c9", "cu9", OTHER, "n1", ("channel-0",))))
    (violation,) = invariants.nothing_held_twice(twice, CTX)
    assert violation.key == "channel-held-twice:n1/channel-0" and violation.hold == 0


def test_a_node_running_pods_of_two_domains_is_held_twice() -> None:
    intruder = Pod("other", "x-p0", "pu9", "x", "n1", "Running", ("c9",))
    claim = Claim("other", "c9", "cu9", OTHER, "n1", ("channel-0-s1",), ("pu9",))
    twice = snap(pods=(*snap().pods, intruder), claims=(*snap().claims, claim))
    assert keys(invariants.nothing_held_twice(twice, CTX)) == ["node-in-two-domains:n1:pods"]
    prepared = with_files(
        snap(), "n1", checkpoint=(Entry("cu0", UID, DONE), Entry("cu9", OTHER, DONE))
    )
    (violation,) = invariants.nothing_held_twice(prepared, CTX)
    assert violation.key == "node-in-two-domains:n1:checkpoint" and violation.hold > 0
    aborted = with_files(
        snap(), "n1", checkpoint=(Entry("cu0", UID, DONE), Entry("cu9", OTHER, "PrepareAborted"))
    )
    assert invariants.nothing_held_twice(aborted, CTX) == []


def test_a_slot_held_by_two_daemons_or_a_node_in_two_records() -> None:
    clique = Clique(
        f"{UID}.c0", UID, "c0", (Daemon("n1", 0, True), Daemon("n2", 0, False)), ("n1", "n2")
    )
    (violation,) = invariants.nothing_held_twice(snap(cliques=(clique,)), CTX)
    assert violation.key == f"slot-held-twice:{UID}.c0/0"
    other = Clique(f"{OTHER}.c0", OTHER, "c0", (Daemon("n1", 0, False),), ("n1",))
    (violation,) = invariants.nothing_held_twice(snap(cliques=(*snap().cliques, other)), CTX)
    assert violation.key == "node-in-two-domains:n1:record" and violation.hold > 0


# -- domains form ----------------------------------------------------------------------------


def test_a_domain_whose_pods_run_must_be_ready_within_the_bound() -> None:
    unready = snap(domains=(Domain(NS, "d000", UID, ready=False),))
    late = dataclasses.replace(unready, at=CTX.bounds.ready + 1)
    assert invariants.domains_form(dataclasses.replace(unready, at=10.0), CTX) == []
    (violation,) = invariants.domains_form(late, CTX)
    assert violation.key == f"domain-not-ready:{KEY}"
    pending = dataclasses.replace(late, pods=(Pod(NS, "d000-p0", "pu0", "d000", "", "Pending"),))
    assert invariants.domains_form(pending, CTX) == [], "still placing: judged at the end"


def test_the_bound_waits_out_the_faults() -> None:
    unready = snap(at=CTX.bounds.ready + 1, domains=(Domain(NS, "d000", UID, ready=False),))
    lasting = dataclasses.replace(CTX, windows=(Window("node-not-ready", "n2", 10.0, None),))
    assert invariants.domains_form(unready, lasting) == []
    ended = dataclasses.replace(CTX, windows=(Window("node-not-ready", "n2", 10.0, 40.0),))
    assert invariants.domains_form(unready, ended) == [], "30s of fault extend the bound"
    assert invariants.domains_form(dataclasses.replace(unready, at=unready.at + 31), ended) != []
    assert ended.due(0.0, 180.0, 210.0) and not ended.due(0.0, 180.0, 209.0)


def test_a_domain_a_fault_undid_gets_its_time_to_form_again() -> None:
    """Found by a 30-minute run: a domain Ready for minutes, unready while its node's fabric
    failed, was judged 2 s after the fault ended (its last change was long before)."""
    unready = snap(at=610.0, domains=(Domain(NS, "d000", UID, ready=False),))
    fabric = Window("degrade-fabric", "n1", 570.0, 608.0, breaks_fabric=True)
    ctx = dataclasses.replace(CTX, changed={KEY: 271.0}, windows=(fabric,))
    assert invariants.domains_form(unready, ctx) == []
    later = dataclasses.replace(unready, at=608.0 + CTX.bounds.recover + 1)
    (violation,) = invariants.domains_form(later, ctx)
    assert violation.key == f"domain-not-ready:{KEY}"


# -- deleted domains leave nothing behind ----------------------------------------------------


def test_a_deleted_domain_must_leave_nothing_once_the_bound_passed() -> None:
    ctx = Context(deleted={UID: 0.0})
    left = snap(at=CTX.bounds.leftovers + 1)
    assert invariants.deletions_complete(dataclasses.replace(left, at=50.0), ctx) == []
    found = invariants.deletions_complete(left, ctx)
    kinds = {v.subject.split(":", 1)[1] for v in found}
    assert kinds == {
        "ComputeDomain",
        "cliques",
        "claims",
        "claim templates",
        "node labels",
        "device holds",
        "CDI specs",
        "checkpoint entries",
        "IMEX processes",
    }
    clean = Snapshot(
        at=left.at, nodes=(Node("n1", True),), files=(NodeFiles("n1", imex_domain=UID),)
    )
    assert invariants.deletions_complete(clean, ctx) == [], "a stopped IMEX's status may name it"
    marked = dataclasses.replace(
        clean, files=(NodeFiles("n1", checkpoint=(Entry("cu0", UID, "PrepareAborted"),)),)
    )
    assert invariants.deletions_complete(marked, ctx) == [], "an unprepare's mark holds nothing"


# -- components ------------------------------------------------------------------------------


def test_a_component_may_be_down_for_a_while_and_during_a_fault_on_its_node() -> None:
    down = Component(
        "plugin-n1",
        "kubelet-plugin",
        "n1",
        False,
        (Container("kubelet-plugin", False, 3, "CrashLoopBackOff"),),
    )
    now = snap(components=(down,))
    (violation,) = invariants.components_ready(now, CTX)
    assert violation.hold == CTX.bounds.component and "(CrashLoopBackOff)" in violation.message
    hit = dataclasses.replace(CTX, windows=(Window("node-not-ready", "n1", 90.0, None),))
    assert invariants.components_ready(now, hit) == []
    assert not invariants.healthy(now, CTX)
    assert invariants.healthy(now, CTX, node="n2"), "another node's component is not n2's concern"
    assert invariants.healthy(now, hit), "a node a lasting fault hits is left out"


# -- the end -------------------------------------------------------------------------------


def test_at_the_end_every_domain_is_formed_and_every_component_ready() -> None:
    assert invariants.final(snap(), CTX) == []
    pending = snap(pods=(Pod(NS, "d000-p0", "pu0", "d000", "", "Pending"),))
    (violation,) = invariants.final(pending, CTX)
    assert violation.key == f"domain-not-ready:{KEY}" and "0/1 pod(s) running" in violation.message
    empty = dataclasses.replace(CTX, expected={KEY: 0})
    assert invariants.final(snap(domains=(Domain(NS, "d000", UID, ready=False),)), empty) == []
    down = snap(components=(Component("w", "webhook", "n2", False),))
    assert keys(invariants.final(down, CTX)) == ["component-crash-looping:w"]


def test_nothing_restarts_once_everything_is_back() -> None:
    later = Component(
        "plugin-n1", "kubelet-plugin", "n1", True, (Container("kubelet-plugin", True, 2),)
    )
    (violation,) = invariants.restarted(snap(), snap(130.0, components=(later,)))
    assert violation.key == "component-restarted:plugin-n1/kubelet-plugin"
    assert invariants.restarted(snap(), snap(130.0)) == []


# -- counting ------------------------------------------------------------------------------


def test_a_violation_counts_once_it_held_its_hold_and_starts_over_when_it_went() -> None:
    brief = Violation("imex-lost", "x", "m", hold=30.0)
    at_once = Violation("slot-moved", "y", "m")
    counted, pending = invariants.confirm({}, [brief, at_once], 100.0)
    assert counted == [at_once] and pending == {brief.key: 100.0, at_once.key: 100.0}
    counted, pending = invariants.confirm(pending, [brief], 129.0)
    assert counted == [] and pending == {brief.key: 100.0}
    counted, _ = invariants.confirm(pending, [brief], 130.0)
    assert counted == [brief]
    _, pending = invariants.confirm(pending, [], 131.0)
    counted, pending = invariants.confirm(pending, [brief], 140.0)
    assert counted == [] and pending == {brief.key: 140.0}


@pytest.mark.parametrize(
    ("values", "p50", "p99"),
    [([], None, None), ([4.0], 4.0, 4.0), ([5.0, 1.0, 3.0, 2.0], 2.0, 5.0)],
)
def test_recovery_percentiles(values: list[float], p50: float | None, p99: float | None) -> None:
    assert (report.percentile(values, 50), report.percentile(values, 99)) == (p50, p99)


def test_the_report_tells_the_seed_the_counts_and_each_violation_in_context() -> None:
    run = report.Report(seed=42, duration=120.0)
    run.faults.update({"kill-plugin": 2})
    run.recoveries["kill-plugin"] = [3.0, 9.0]
    run.timeline = [report.Record(10.0, "fault #1 kill-plugin on n1"), report.Record(500.0, "x")]
    violation = Violation("pod-lost", POD, "pod is gone")
    run.findings.append(
        report.Finding(20.0, violation, 42, report.around(run.timeline, 20.0), ("an event",))
    )
    text = run.render()
    assert "seed 42" in text and "kill-plugin 2" in text and "violations        1" in text
    assert "kill-plugin              3.0 / 9.0 (2, 0)" in text
    assert "[   10.0s] fault #1 kill-plugin on n1" in text and "500.0" not in text
    assert "Replay: make chaos SEED=42 DURATION=120s" in text
    assert not run.ok
    body = run.to_json()
    assert body["violations"][0]["seed"] == 42 and body["recovery"]["kill-plugin"]["p99"] == 9.0


def test_bounds_are_generous_but_finite() -> None:
    bounds = Bounds()
    assert 0 < bounds.settle < bounds.imex < bounds.component < bounds.ready
