"""The benchmarks' clusters: simulated racks with the chart installed, per module."""

from __future__ import annotations

import contextlib
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster, topology
from computedomains import waiting
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, kube

NAMESPACE = "bench"
"""Where the benchmarks' workloads run."""
RELEASE = "cd"
DRIVER_NAMESPACE = "cd-system"
"""The release and the namespace the chart is installed into."""


@contextlib.contextmanager
def chart_cluster(
    tmp_path: pathlib.Path,
    shape: topology.Topology,
    *,
    install_minutes: int = 5,
    runtime: str | None = None,
) -> Iterator[tuple[cluster.SimCluster, Any, str]]:
    """A simulated cluster of ``shape``, the chart installed (fake IMEX start-up 0.5 s).

    ``runtime``: how its kubelet runs the chart's pods (``cdsim.controlplane.RUNTIMES``; None:
    the default, containers from the image). Yields once every plugin publishes: the cluster,
    an admin client, the driver namespace.
    """
    sim = cluster.SimCluster(
        name=f"bench-{uuid.uuid4().hex[:6]}", topology_spec=shape, log=lambda _: None,
        runtime=runtime,
    )  # fmt: skip
    with sim:
        api = clusters.typed_client(sim.kubeconfig)
        h = rendering.helm_for("helm3", tmp_path, kubeconfig=sim.kubeconfig)
        h.run(
            "install",
            RELEASE,
            *_published_chart(sim, tmp_path),
            "-n",
            DRIVER_NAMESPACE,
            "--create-namespace",
            *rendering.sim_values(),
            # The shipped intervals, not the test profile's 5 s: a benchmark measures the load
            # a real install puts on the API server and the nodes.
            "--set",
            "nodeInit.recheckInterval=60,kubeletPlugin.collectionInterval=60",
            "--set-json",
            'imexAgent.extraEnv=[{"name":"COMPUTE_DOMAINS_FAKE_IMEX_HOSTS","value":"/var/run/compute-domains/imex/hosts"},{"name":"COMPUTE_DOMAINS_FAKE_IMEX_START_DELAY","value":"0.5"}]',
            "--wait",
            "--timeout",
            f"{install_minutes}m",
            timeout=60 * (install_minutes + 1),
        )
        slices = client.ResourceV1Api(api)
        waiting.until(
            "every plugin to publish",
            lambda: (
                len(
                    [
                        s
                        for s in slices.list_resource_slice().items
                        if s.spec.driver == constants.DRIVER_NAME and s.spec.devices
                    ]
                )
                >= shape.node_count()
            ),
            timeout=300,
            interval=1,
        )
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        kube.wait_for_default_service_account(api, NAMESPACE)
        yield sim, api, DRIVER_NAMESPACE


def _published_chart(sim: cluster.SimCluster, workdir: pathlib.Path) -> list[str]:
    """This build's chart, from the benchmark cluster's registry (published if not yet)."""
    return clusters.TestCluster(kubeconfig=sim.kubeconfig, workdir=workdir, sim=sim).chart()


def upgrade(sim: cluster.SimCluster, tmp_path: pathlib.Path, *values: str) -> None:
    """``helm upgrade`` the release, keeping its values, with ``values`` (``--set`` each)."""
    h = rendering.helm_for("helm3", tmp_path, kubeconfig=sim.kubeconfig)
    sets = [arg for value in values for arg in ("--set", value)]
    h.run("upgrade", RELEASE, *_published_chart(sim, tmp_path), "-n", DRIVER_NAMESPACE,
          "--reuse-values", *sets, "--wait", "--timeout", "5m", timeout=360)  # fmt: skip


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[cluster.SimCluster, Any, str]]:
    """The default two racks (36 nodes), chart installed."""
    with chart_cluster(tmp_path_factory.mktemp("helm"), topology.Topology()) as ready:
        yield ready
