"""The two ways the simulated kubelet runs the chart's pods, side by side in one run.

Containers pulled from the cluster's registry and run from the image under runc (what every
test uses) against processes of this checkout (the simulation before images existed). Each on
a fresh cluster of two racks (36 nodes) with the chart installed the same way: 18-node
formations (all pods Ready, and that minus a plain DRA claim on the same nodes in the same
run), then the per-node footprint while idle (:mod:`footprint`). The figures that count are
the ratios, containers over processes, reported beside their targets (formation p50 within
10 %; the chart's resident memory per node ≤ 100 MiB in both). runc's own processes (a
``runc run`` per container) are reported apart: they are the simulation's runtime, as
containerd's shims are a node's, not the chart's.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kubernetes import client

from cdsim import controlplane, plaindra, topology
from computedomains.kube import client as kube_client
from tests.benchmarks import conftest, footprint, report
from tests.benchmarks import test_formation as formation
from tests.benchmarks.conftest import NAMESPACE

RUNS = 8
"""18-node formations per runtime."""
TARGET_RATIO = 1.10
TARGET_MIB = 100


def _measure(tmp_path: pathlib.Path, runtime: str) -> dict[str, Any]:
    """Formations and the idle footprint on a fresh 36-node cluster running ``runtime``."""
    with conftest.chart_cluster(tmp_path / runtime, topology.Topology(), runtime=runtime) as (
        sim, api, driver_ns,
    ):  # fmt: skip
        lean = kube_client.Client.from_kubeconfig(sim.kubeconfig)
        client.ResourceV1Api(api).create_namespaced_resource_claim_template(
            NAMESPACE, plaindra.claim_template(formation.PLAIN_TEMPLATE, NAMESPACE)
        )
        with plaindra.running(lean, sim.host_trees):
            measured = formation.rounds(api, driver_ns, f"rt-{runtime}-", RUNS)
        idle = footprint.measure(api, len(sim.nodes))
        runc_mib = footprint.runtime_rss_mib()
    return {
        "formation_18_nodes_s": report.summarize(measured.formation),
        "plain_dra_claim_s": report.summarize(measured.plain),
        "formation_minus_plain_dra_s": formation.paired(measured),
        "rss_per_node_mib": idle["rss_per_node_mib"],
        "rss_by_component_p50_mib": idle["rss_by_component_p50_mib"],
        "runtime_rss_per_node_mib": round(runc_mib / idle["nodes"], 1),
        "nodes": idle["nodes"],
    }


@pytest.mark.timeout(3600)
def test_containers_from_the_image_against_processes_of_the_checkout(
    tmp_path: pathlib.Path,
) -> None:
    by_runtime = {runtime: _measure(tmp_path, runtime) for runtime in ("process", "runc")}
    process, runc = by_runtime["process"], by_runtime["runc"]

    def ratio(key: str, stat: str = "p50") -> float | str:
        base = float(process[key][stat])
        return round(float(runc[key][stat]) / base, 3) if base else "-"

    figures = {
        **by_runtime,
        "ratio_runc_over_process": {
            "formation_18_nodes_p50": ratio("formation_18_nodes_s"),
            "plain_dra_claim_p50": ratio("plain_dra_claim_s"),
            "rss_per_node_p50": ratio("rss_per_node_mib"),
        },
        "targets": {"formation_p50_ratio_max": TARGET_RATIO, "rss_per_node_mib_max": TARGET_MIB},
    }
    runtime: list[float | str] = [
        process["runtime_rss_per_node_mib"],
        runc["runtime_rss_per_node_mib"],
        "-",
    ]
    rows: list[tuple[str, list[float | str]]] = [
        (label, [process[key][stat], runc[key][stat], ratio(key, stat)])
        for label, key, stat in (
            ("18-node formation, all Ready p50 (s)", "formation_18_nodes_s", "p50"),
            ("18-node formation, all Ready p99 (s)", "formation_18_nodes_s", "p99"),
            ("plain DRA claim, all Ready p50 (s)", "plain_dra_claim_s", "p50"),
            ("formation minus plain DRA p50 (s)", "formation_minus_plain_dra_s", "p50"),
            ("resident memory per node p50 (MiB)", "rss_per_node_mib", "p50"),
            ("resident memory per node max (MiB)", "rss_per_node_mib", "max"),
        )
    ]
    rows.append(("the runtime's own (runc) memory per node (MiB)", runtime))
    table = report.Table(
        title="Processes of the checkout against containers from the image, one run (36 nodes)",
        columns=["processes", "containers (runc)", "ratio"],
        rows=rows,
    )
    report.save("runtimes", figures, tables=[table])
    assert set(controlplane.RUNTIMES) == set(by_runtime)
    assert process["nodes"] == runc["nodes"] == 36
    assert process["formation_18_nodes_s"]["n"] == runc["formation_18_nodes_s"]["n"] == RUNS
