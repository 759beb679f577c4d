"""Benchmark: what each of 36 nodes costs while idle, after one 18-node formation.

RSS of the chart's per-node processes (target: ≤ 100 MiB together), API watches open and API
requests per second, per node (``footprint.py``). The four-rack benchmark measures the same at
72 nodes.
"""

from __future__ import annotations

from typing import Any

from cdsim import cluster
from tests.benchmarks import footprint, publishing, report
from tests.benchmarks import test_formation as formation

TARGET_MIB = 100


def rss_plot(figures: dict[str, Any]) -> report.Plot:
    """Per-node RSS by component beside the target."""
    parts = figures["rss_by_component_p50_mib"]
    return report.Plot(
        name="rss",
        title=f"{figures['nodes']} nodes: resident memory per node (p50, MiB)",
        labels=[*parts, "all per-node processes", "target"],
        series={"MiB": [*parts.values(), figures["rss_per_node_mib"]["p50"], TARGET_MIB]},
        unit="MiB",
    )


def test_per_node_rss_watches_and_requests(installed: tuple[cluster.SimCluster, Any, str]) -> None:
    _, api, driver_ns = installed
    formation.rounds(api, driver_ns, "fp", 1)  # every per-node code path loaded once
    figures = footprint.measure(api, len(publishing.sim_nodes(api)))
    report.save("node-footprint", figures, plots=[rss_plot(figures)])
    assert figures["nodes"] == 36
    assert set(figures["rss_by_component_p50_mib"]) == set(footprint.COMPONENTS)
