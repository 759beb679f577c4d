"""The chaos run's timeline: one seed, one run; every fault kind; placeable workloads."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from cdsim import nodefaults, topology
from cdsim.chaos import manifests, schedule
from cdsim.chaos.schedule import (
    ClusterShape,
    Create,
    Delete,
    FaultKind,
    Inject,
    Layout,
    Scale,
    Shape,
    Undo,
)

TWO_RACKS = ClusterShape(nodes=36, racks=2)
SMALL = ClusterShape(nodes=8, racks=2)
SEEDS = range(40)


def test_a_seed_gives_the_same_timeline_and_another_seed_another() -> None:
    first = schedule.build(1234, 1800, TWO_RACKS)
    assert schedule.build(1234, 1800, TWO_RACKS) == first
    assert schedule.build(1235, 1800, TWO_RACKS) != first


def test_faults_and_workload_are_drawn_apart() -> None:
    """Drawing faults differently (another gap) leaves a seed's workload as it was."""
    calm = schedule.build(7, 600, TWO_RACKS)
    busy = schedule.build(7, 600, TWO_RACKS, schedule.Settings(fault_gap=(5.0, 10.0)))
    assert busy.workload() == calm.workload()
    assert len(busy.faults) > len(calm.faults)


@pytest.mark.parametrize("duration", [60.0, 120.0, 1800.0])
@pytest.mark.parametrize("seed", [0, 1, 99, 2024])
def test_every_fault_kind_comes_at_least_once_and_is_undone_in_time(
    seed: int, duration: float
) -> None:
    timeline = schedule.build(seed, duration, TWO_RACKS)
    assert all(count >= 1 for count in timeline.fault_counts().values())
    assert [f.number for f in timeline.faults] == list(range(1, len(timeline.faults) + 1))
    assert [f.at for f in timeline.faults] == sorted(f.at for f in timeline.faults)
    undone = {s.fault.number: s.at for s in timeline.steps if isinstance(s, Undo)}
    for fault in timeline.faults:
        assert fault.at > 0 and fault.ends <= duration
        assert 0 <= fault.pick < 1
        if fault.kind in schedule.LASTING:
            low, high = schedule.LASTING[fault.kind]
            assert low <= fault.lasts <= max(low, high)
            assert undone[fault.number] == fault.ends
        else:
            assert fault.lasts == 0 and fault.number not in undone
        variants = schedule.VARIANTS.get(fault.kind, ("",))
        assert fault.variant in variants


def test_steps_come_in_time_order_and_an_undo_never_before_its_fault() -> None:
    timeline = schedule.build(5, 1800, TWO_RACKS)
    assert [s.at for s in timeline.steps] == sorted(s.at for s in timeline.steps)
    injected: set[int] = set()
    for step in timeline.steps:
        if isinstance(step, Inject):
            injected.add(step.fault.number)
        if isinstance(step, Undo):
            assert step.fault.number in injected


@pytest.mark.parametrize("seed", SEEDS)
def test_the_api_server_restart_and_the_etcd_pause_never_overlap(seed: int) -> None:
    timeline = schedule.build(seed, 1800, TWO_RACKS)
    control = sorted(
        (f for f in timeline.faults if f.kind in schedule.CONTROL_PLANE_FAULTS), key=lambda f: f.at
    )
    margin = schedule.Settings().cp_margin
    for earlier, later in itertools.pairwise(control):
        assert later.at >= earlier.ends + margin - 0.1, (earlier, later)


def _replay(timeline: schedule.Timeline, settings: schedule.Settings) -> list[tuple[float, int]]:
    """Nodes held after each workload step, as the schedule counts them."""
    live: dict[str, Shape] = {}
    releasing: list[tuple[float, int]] = []
    held = []
    for step in timeline.workload():
        if isinstance(step, Create):
            assert step.domain not in live
            live[step.domain] = step.shape
        elif isinstance(step, Scale):
            shape = live[step.domain]
            if shape.layout is Layout.SPREAD and step.pods < shape.pods:
                releasing.append((step.at + settings.release_delay, shape.pods - step.pods))
            live[step.domain] = shape.scaled(step.pods)
        elif isinstance(step, Delete):
            releasing.append((step.at + settings.release_delay, live.pop(step.domain).nodes))
        used = sum(s.nodes for s in live.values())
        used += sum(n for until, n in releasing if until > step.at)
        held.append((step.at, used))
    return held


@pytest.mark.parametrize("cluster", [TWO_RACKS, SMALL])
@pytest.mark.parametrize("seed", SEEDS)
def test_domains_never_hold_more_than_the_capacity_so_all_can_be_placed(
    seed: int, cluster: ClusterShape
) -> None:
    settings = schedule.Settings()
    timeline = schedule.build(seed, 1800, cluster, settings)
    budget = int(cluster.nodes * settings.capacity)
    assert all(used <= budget for _, used in _replay(timeline, settings))
    for step in timeline.workload():
        if isinstance(step, Create):
            shape = step.shape
            assert shape.clique in schedule.CLIQUE_PLACEMENTS
            assert 0 <= step.tenant < settings.tenants
            if shape.layout is Layout.SPREAD:
                assert 2 <= shape.pods <= min(settings.max_spread, cluster.nodes_per_rack)
            else:
                assert 1 <= shape.pods <= settings.max_packed


def test_a_long_run_creates_scales_and_deletes_in_every_tenant_some_domains_at_once() -> None:
    timeline = schedule.build(11, 1800, TWO_RACKS)
    steps = timeline.workload()
    creates = [s for s in steps if isinstance(s, Create)]
    assert any(isinstance(s, Scale) for s in steps) and any(isinstance(s, Delete) for s in steps)
    assert {s.tenant for s in creates} == {0, 1, 2}
    assert {s.shape.layout for s in creates} == set(Layout)
    assert {s.shape.clique for s in creates} == set(schedule.CLIQUE_PLACEMENTS)
    starts = [s.at for s in creates]
    assert starts.count(1.0) >= 2, "domains at once from the start"
    assert any(starts.count(t) >= 2 for t in set(starts) - {1.0}), "bursts later too"
    assert max(s.at for s in steps) <= 1800 * schedule.Settings().workload_end
    assert {s.pods_first for s in steps if isinstance(s, Delete)} == {True, False}


def test_a_short_run_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 60s"):
        schedule.build(1, 59, TWO_RACKS)


def test_variants_are_what_the_faults_understand() -> None:
    assert set(schedule.VARIANTS[FaultKind.CORRUPT_CHECKPOINT]) == set(nodefaults.CHECKPOINT_DAMAGE)
    profiles = {p.value for p in topology.FabricProfile}
    assert set(schedule.VARIANTS[FaultKind.DEGRADE_FABRIC]) <= profiles
    assert set(schedule.NODE_FAULTS).isdisjoint(schedule.CONTROL_PLANE_FAULTS)


@pytest.mark.parametrize(
    ("candidates", "pick", "avoid", "chosen"),
    [
        (["n3", "n1", "n2"], 0.0, [], "n1"),
        (["n3", "n1", "n2"], 0.99, [], "n3"),
        (["n3", "n1", "n2"], 0.5, [], "n2"),
        (["n3", "n1", "n2"], 0.0, ["n1"], "n2"),
        (["n1", "n2"], 0.7, ["n1", "n2"], "n2"),  # all hit lately: choose among all
        ([], 0.3, [], None),
    ],
)
def test_a_pick_chooses_among_the_candidates_of_the_moment(
    candidates: list[str], pick: float, avoid: list[str], chosen: str | None
) -> None:
    assert schedule.choose(candidates, pick, avoid=avoid) == chosen


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30m", 1800.0), ("150s", 150.0), ("1h30m", 5400.0), ("90", 90.0), ("2.5m", 150.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert schedule.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "30x", "-5s", "1h 30m", "s30"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        schedule.parse_duration(text)


def test_every_step_reads_as_a_line() -> None:
    fault = schedule.Fault(3, FaultKind.DEGRADE_FABRIC, 40.0, 25.0, 0.5, "failed")
    shape = Shape(4, Layout.SPREAD, "Required")
    assert schedule.describe(Inject(40.0, fault)) == (
        "fault #3 degrade-fabric (failed), undone after 25s"
    )
    assert schedule.describe(Undo(65.0, fault)) == "undo #3 degrade-fabric (failed)"
    assert schedule.describe(Create(1.0, "d000", 2, shape)) == (
        "create t2/d000: 4 pod(s) spread, clique Required"
    )
    assert schedule.describe(Scale(5.0, "d000", 2, 3)) == "scale t2/d000 to 3 pod(s)"
    assert schedule.describe(Delete(9.0, "d000", 2, False)) == "delete t2/d000 (domain first)"


def test_a_spread_domains_pods_never_share_a_node_and_a_packed_ones_always_do() -> None:
    spread = manifests.pod("run1", "d001", 4, Layout.SPREAD)
    packed = manifests.pod("run1", "d002", 0, Layout.PACKED)
    assert spread["metadata"]["name"] == "d001-p4"
    term = spread["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    assert term == {
        "labelSelector": {
            "matchLabels": {manifests.RUN_LABEL: "run1", manifests.DOMAIN_LABEL: "d001"}
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    assert "podAffinity" in packed["spec"]["affinity"]
    longest = max(schedule.LASTING[FaultKind.NODE_NOT_READY])
    assert {t["tolerationSeconds"] for t in spread["spec"]["tolerations"]} == {300}
    assert longest < 300, "a NotReady node never evicts the run's pods"
    assert spread["spec"]["resourceClaims"] == [
        {"name": "imex", "resourceClaimTemplateName": "d001-channel"}
    ]
    domain = manifests.domain("run1", "d001", Shape(2, Layout.SPREAD, "Preferred"))
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta2"
    assert domain["spec"] == {
        "channel": {"resourceClaimTemplate": {"name": "d001-channel"}},
        "placement": {"clique": "Preferred"},
    }
    assert manifests.namespace("run1", 2)["metadata"] == {
        "name": "chaos-run1-t2",
        "labels": {manifests.RUN_LABEL: "run1"},
    }


def test_a_fault_is_named_by_number_kind_and_variant() -> None:
    fault = schedule.Fault(7, FaultKind.KILL_PLUGIN, 10.0, 0.0, 0.1)
    assert fault.label == "#7 kill-plugin" and fault.ends == 10.0
    assert dataclasses.replace(fault, variant="x").label == "#7 kill-plugin (x)"
