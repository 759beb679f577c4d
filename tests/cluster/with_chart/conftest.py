"""Cluster tests that run against the installed chart.

They live in their own package so they run after the other cluster tests, several of which
play the controller or the IMEX agent themselves and must not meet the chart's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from tests.chart import rendering
from tests.support import clusters, kube, lifecycle

RELEASE = "cd-e2e"
PACKAGE = "tests/cluster/with_chart/"
CHAOS_TEST = PACKAGE + "test_chaos.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The chaos run goes last among the chart's tests.

    It kills, restarts and pauses what every test here relies on: anything it leaves broken
    must fail it, not the tests after it. (A conftest's hook sees every collected item.)
    """
    chaos = [i for i in items if i.nodeid.startswith(CHAOS_TEST)]
    rest = [i for i in items if not i.nodeid.startswith(CHAOS_TEST)]
    if not chaos:
        return
    ours = [n for n, i in enumerate(rest) if i.nodeid.startswith(PACKAGE)]
    after = ours[-1] + 1 if ours else len(rest)
    items[:] = [*rest[:after], *chaos, *rest[after:]]


@pytest.fixture(scope="package")
def chart(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The chart (gb200-nvl72 under the simulation's overlay) installed once for the cluster
    tests that need it.

    The simulated kubelet runs node-init, the kubelet plugin, the IMEX agent and the controller
    from the image in the cluster's registry, with their own tokens and the chart's arguments.
    Yields the release namespace once every node's plugin has published its devices;
    uninstalled before the chart tests (which install their own releases) run.
    """
    api = cluster.api()
    namespace = f"cd-system-{uuid.uuid4().hex[:4]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    h = rendering.helm_for("helm3", tmp_path_factory.mktemp("helm"), kubeconfig=cluster.kubeconfig)
    # The earlier cluster tests installed our CRDs by hand (pointing their conversion at no
    # webhook); the release installs its own, as on a fresh cluster.
    lifecycle.remove_crds(api)
    args = [
        "--namespace",
        namespace,
        *rendering.sim_values(),
        # Teardown must not be refused by a domain a failed test left running.
        "--set",
        "uninstall.force=true",
        "--wait",
        "--timeout",
        "10m",
    ]
    h.run("install", RELEASE, *cluster.chart(), *args, timeout=700)
    try:
        wanted = {n.name for n in sim.nodes}
        waiting.until(
            "every simulated node's plugin to publish its ResourceSlice",
            lambda: {s.spec.node_name for s in kube.driver_slices(api) if s.spec.devices} >= wanted,
            timeout=240,
            interval=1,
        )
        yield namespace
    finally:
        done = h.attempt(
            "uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout", "3m"
        )
        if done.returncode != 0:
            hook = f"{RELEASE}-compute-domains-hook-uninstall"
            raise AssertionError(
                f"helm uninstall {RELEASE} failed: {done.stdout}{done.stderr}\n"
                f"the uninstall hook said:\n{kube.job_log(cluster, namespace, hook, 'uninstall')}"
            )
        client.CoreV1Api(api).delete_namespace(namespace)
