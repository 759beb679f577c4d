"""Fixtures: one cluster per test session, fresh namespaces, ServiceAccount clients.

By default the session starts the simulated cluster (real control plane, simulated GB200
nodes). ``--kube-config`` points the same tests at an existing cluster instead, with the
option names of pytest-helm-charts (``--chart-path``, ``--chart-version``,
``--app-config-file-path`` and their ``ATS_*`` environment twins); tests marked ``sim`` then
skip, since they inspect simulated nodes. Unlike pytest-helm-charts, ``$KUBECONFIG`` alone
never selects a cluster: a stray variable must not point a test run at a real cluster.
"""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from computedomains.sim import cluster as sim_cluster
from computedomains.sim import topology
from tests.support import clusters, kube


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compute-domains cluster")
    group.addoption(
        "--kube-config",
        default=None,
        help="run cluster tests against this existing cluster instead of the simulated one",
    )
    group.addoption(
        "--chart-path",
        default=os.environ.get("ATS_CHART_PATH"),
        help="chart to test (env ATS_CHART_PATH)",
    )
    group.addoption(
        "--chart-version",
        default=os.environ.get("ATS_CHART_VERSION"),
        help="chart version to test (env ATS_CHART_VERSION)",
    )
    group.addoption(
        "--app-config-file-path",
        default=os.environ.get("ATS_APP_CONFIG_FILE_PATH"),
        help="values file for the chart (env ATS_APP_CONFIG_FILE_PATH)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: needs a running cluster")


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[clusters.TestCluster]:
    """The session's cluster: started once, stopped (every process, by PID) at the end."""
    opts = request.config.option
    workdir = tmp_path_factory.mktemp("cluster")
    common = {
        "workdir": workdir,
        "chart_path": pathlib.Path(opts.chart_path) if opts.chart_path else None,
        "chart_version": opts.chart_version,
        "values_file": pathlib.Path(opts.app_config_file_path)
        if opts.app_config_file_path
        else None,
    }
    if opts.kube_config:
        yield clusters.TestCluster(kubeconfig=pathlib.Path(opts.kube_config), **common)
        return
    with sim_cluster.SimCluster(
        name=f"pytest-{os.getpid()}", topology_spec=topology.Topology(racks=2, nodes_per_rack=18)
    ) as sim:
        yield clusters.TestCluster(kubeconfig=sim.kubeconfig, sim=sim, **common)


@pytest.fixture(scope="session")
def sim(cluster: clusters.TestCluster) -> sim_cluster.SimCluster:
    """The simulated cluster itself; skips against an existing cluster."""
    if cluster.sim is None:
        pytest.skip(
            "needs the simulated GB200 nodes and host trees; --kube-config names a real cluster"
        )
    return cluster.sim


@pytest.fixture
def api(cluster: clusters.TestCluster) -> client.ApiClient:
    """An admin API client."""
    return cluster.api()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name, "labels": {"compute-domains.test": "true"}}})
    kube.wait_for_default_service_account(api, name)
    yield name
    core.delete_namespace(name)
