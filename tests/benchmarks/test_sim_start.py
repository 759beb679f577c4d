"""Warm start of the simulated cluster: control plane, then 36 GB200 nodes Ready.

Baseline in the same run: a one-node cluster, i.e. the control plane's own start; the ratio
shows what creating and readying the 36 simulated nodes adds.
"""

from __future__ import annotations

import uuid

from cdsim import cluster, topology
from tests.benchmarks import report

RUNS = 3


def _start_once(spec: topology.Topology) -> tuple[float, float]:
    sim = cluster.SimCluster(
        name=f"bench-{uuid.uuid4().hex[:6]}", topology_spec=spec, log=lambda _: None
    )
    try:
        state = sim.start()
        return state.control_plane_seconds, state.ready_seconds
    finally:
        sim.stop()


def test_warm_sim_up_to_36_nodes_ready() -> None:
    full = [_start_once(topology.Topology(racks=2, nodes_per_rack=18)) for _ in range(RUNS)]
    base = [_start_once(topology.Topology(racks=1, nodes_per_rack=1)) for _ in range(RUNS)]
    full_ready = report.summarize([r for _, r in full])
    base_ready = report.summarize([r for _, r in base])
    report.save(
        "sim-start",
        {
            "control_plane_healthy_s": report.summarize([c for c, _ in full]),
            "nodes_36_ready_s": full_ready,
            "baseline_1_node_ready_s": base_ready,
            "ratio_36_vs_1_node_p50": round(full_ready["p50"] / base_ready["p50"], 3),
        },
    )
    assert full_ready["n"] == RUNS
