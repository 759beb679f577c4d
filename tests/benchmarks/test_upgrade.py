"""Benchmark: `helm upgrade` from the previous chart (0.1.0) on 36 nodes with live domains.

Wall time of the upgrade as an operator sees it (`helm upgrade --wait`, hooks included:
preflight, the rollout, migrate, verify), with four Ready domains of three nodes each running
throughout; and how many workload pods were replaced or restarted (must be 0).
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains.api import constants
from tests.benchmarks import report
from tests.chart import rendering
from tests.support import lifecycle, previous

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

DOMAINS = 4
NODES_PER_DOMAIN = 3


def test_upgrade_wall_time_with_live_domains(
    sim: sim_cluster.SimCluster, api: client.ApiClient, releases: lifecycle.Releases
) -> None:
    old = previous.build()
    namespace = f"bench-up-{uuid.uuid4().hex[:4]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    nodes = sorted(n.name for n in sim.nodes)
    release = lifecycle.install_previous(releases, sim, api, old, "cd-bench")
    live = [
        lifecycle.live_domain(
            api,
            namespace,
            nodes[i * NODES_PER_DOMAIN : (i + 1) * NODES_PER_DOMAIN],
            num_nodes=NODES_PER_DOMAIN,
        )[0]
        for i in range(DOMAINS)
    ]
    before = [
        lifecycle.observe(api, namespace, release.namespace, d, version=constants.VERSION)
        for d in live
    ]
    started = time.monotonic()
    release.upgrade(*releases.cluster.chart(), *rendering.sim_values())
    seconds = time.monotonic() - started
    after = [
        lifecycle.observe(api, namespace, release.namespace, d, version=constants.VERSION_V1BETA2)
        for d in live
    ]
    moved = sum(
        1
        for b, a in zip(before, after, strict=True)
        for name, pod in b.pods.items()
        if a.pods.get(name) != pod
    ) + sum(1 for b, a in zip(before, after, strict=True) if a.slots != b.slots)
    figures = {
        "nodes": len(nodes),
        "live_domains": DOMAINS,
        "upgrade_seconds": round(seconds, 1),
        "pods_or_slots_moved": moved,
    }
    path = report.save("upgrade", figures)
    print(f"\nupgrade 0.1.0 -> 0.2.0: {figures} ({path})")
    client.CoreV1Api(api).delete_namespace(namespace)
    assert moved == 0
