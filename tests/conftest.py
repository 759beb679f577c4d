"""Fixtures: the session's clusters, fresh namespaces, ServiceAccount clients.

By default the session starts the simulated cluster (real control plane, simulated GB200
nodes), and a smaller second one for the tests of whole release lifecycles. The
pytest-helm-charts plugin's options point the same tests at an existing cluster and chart
instead: ``--kubeconfig`` (the cluster), ``--chart-path``, ``--chart-version`` and
``--app-config-file-path`` (the values file), the last three with their ``ATS_*`` environment
twins; tests marked ``sim`` then skip, since they inspect simulated nodes. Unlike the plugin's
``kube_config`` fixture, ``$KUBECONFIG`` alone never selects a cluster: a stray variable must
not point a test run at a real cluster.
"""

from __future__ import annotations

import os
import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from pytest_helm_charts import fixtures as helm_charts

from cdsim import cluster as sim_cluster
from cdsim import topology
from tests.support import clusters, kube, lifecycle
from tests.support.controller import ControllerProcess


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster: needs a running cluster")


SESSION_SCOPE = "the session cluster"
LIFECYCLE_SCOPE = "the lifecycle cluster"
UNIT_SCOPE = "the unit tests"
SESSION_FILES = ("tests/chart/test_schemas.py",)
"""Files outside tests/cluster that use the session cluster (server-side dry runs)."""
DEMO_TEST = "tests/cluster/test_demo.py"
"""Starts its own clusters (two demos side by side), the heaviest single test."""
OWN_CLUSTER_FILES = (
    DEMO_TEST,
    "tests/cluster/test_teardown.py",
    "tests/cluster/test_preflight_apis.py",
)
"""Files under tests/cluster that start clusters (or API servers) of their own: each a piece
of its own, so the session cluster's worker does not wait for them."""


def work_unit(nodeid: str) -> str:
    """The piece of the suite a test belongs to under several workers (``make test``).

    Every test of a cluster goes to the one worker that starts that cluster, once: the session
    cluster's tests (the chart's package among them, which shares one install), and the
    lifecycle cluster's (the release tests and the chart's install test). The unit tests go as
    one piece; every other file is a piece of its own.
    """
    path = nodeid.split("::", maxsplit=1)[0]
    if path.startswith("tests/cluster/with_releases/") or path == "tests/chart/test_install.py":
        return LIFECYCLE_SCOPE
    if (path.startswith("tests/cluster/") and path not in OWN_CLUSTER_FILES) or (
        path in SESSION_FILES
    ):
        return SESSION_SCOPE
    if path.startswith("tests/unit/"):
        return UNIT_SCOPE
    return path


_QUEUE = (SESSION_SCOPE, LIFECYCLE_SCOPE, UNIT_SCOPE, DEMO_TEST)
"""The workers' queue, as xdist hands it out: each worker gets its cluster's piece first;
the pieces after them go to whichever worker runs short of work first."""


def _queue_position(item: pytest.Item) -> int:
    """Where an item goes in the workers' queue (:data:`_QUEUE`; the rest after it)."""
    unit = work_unit(item.nodeid)
    return _QUEUE.index(unit) if unit in _QUEUE else len(_QUEUE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``), queue the tests as :func:`_queue_position` says
    (a stable sort: within a piece, tests keep their usual order)."""
    if hasattr(config, "workerinput"):
        items.sort(key=_queue_position)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that ran a controller process shows the end of that controller's log."""
    report = yield
    if report.when == "call" and report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, ControllerProcess):
                report.sections.append((f"end of {value.name}'s log", value.log_tail()))
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup`` (``make test``): hand out the pieces of :func:`work_unit`.

    (pytest-xdist's own ``xdist_group`` marks need a node ID it can rewrite, which pytest 9 no
    longer has.)
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]  # noqa: PLC0415

    class ByWorkUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def _plugin_setting(config: pytest.Config, env_var: str) -> str | None:
    """A pytest-helm-charts setting as its fixtures read it: the option, else its env twin.

    The plugin's fixtures are module-scoped; the session's cluster needs the values first.
    """
    option = helm_charts.get_cmd_line_option_name_from_env_var(env_var)
    value = config.getoption(option) or os.environ.get(env_var)
    return str(value) if value else None


FULL_TOPOLOGY = topology.Topology(racks=2, nodes_per_rack=18)
"""The session's cluster: two GB200 NVL72 racks of 18 nodes."""
LIFECYCLE_TOPOLOGY = topology.Topology(racks=2, nodes_per_rack=4)
"""The lifecycle tests' cluster: two racks (two cliques) of four nodes."""
LIFECYCLE_CHART_VALUES = ("--set", "kubeletPlugin.updateStrategy.rollingUpdate.maxUnavailable=50%")
"""What the lifecycle cluster's releases are installed with: the production profile's 10 %
rolls a plugin at a time on every size up to ten nodes, as a user of a cluster this small would
not leave it. Four at a time turns each release's roll of the eight nodes from eight rounds into
two; the session cluster's install keeps the profile's pace."""


def _test_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    name: str,
    layout: topology.Topology,
    chart_values: tuple[str, ...] = (),
) -> Iterator[clusters.TestCluster]:
    """A simulated cluster of ``layout`` (stopped, every process by PID, when the generator
    closes), or the cluster ``--kubeconfig`` names, whatever the layout."""
    config = request.config
    workdir = tmp_path_factory.mktemp(name)
    chart_path = _plugin_setting(config, helm_charts.ENV_VAR_CHART_PATH)
    values_file = _plugin_setting(config, helm_charts.ENV_VAR_APP_CONFIG_PATH)
    common = {
        "workdir": workdir,
        "chart_path": pathlib.Path(chart_path) if chart_path else None,
        "chart_version": _plugin_setting(config, helm_charts.ENV_VAR_CHART_VERSION),
        "values_file": pathlib.Path(values_file) if values_file else None,
        "chart_values": chart_values,
    }
    # The plugin's --kubeconfig; its fixture would also take $KUBECONFIG, we do not.
    kubeconfig = config.getoption(
        helm_charts.get_cmd_line_option_name_from_env_var(helm_charts.ENV_VAR_KUBE_CONFIG)
    )
    if kubeconfig:
        yield clusters.TestCluster(kubeconfig=pathlib.Path(kubeconfig), **common)
        return
    with sim_cluster.SimCluster(name=f"{name}-{os.getpid()}", topology_spec=layout) as sim:
        yield clusters.TestCluster(kubeconfig=sim.kubeconfig, sim=sim, **common)


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[clusters.TestCluster]:
    """The session's cluster: started once, stopped (every process, by PID) at the end."""
    yield from _test_cluster(request, tmp_path_factory, name="pytest", layout=FULL_TOPOLOGY)


@pytest.fixture(scope="session")
def lifecycle_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[clusters.TestCluster]:
    """A second, smaller cluster for the tests that install, upgrade, roll back and remove
    whole releases (tests/cluster/with_releases, the chart's install test).

    Every release step restarts the components of every node, so their cost grows with the
    nodes while their scenarios (domains across two cliques, idle nodes rolled clique by
    clique, jobs kept on their agents) need only a few. Started on first use.
    """
    yield from _test_cluster(
        request,
        tmp_path_factory,
        name="pytest-lifecycle",
        layout=LIFECYCLE_TOPOLOGY,
        chart_values=LIFECYCLE_CHART_VALUES,
    )


@pytest.fixture(autouse=True)
def _cluster_still_runs(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the simulated cluster: every process of its control plane (the
    simulated kubelet among them) still runs; else fail here, with its log's tail, rather
    than let every later test wait for it."""
    yield
    # A test parametrized with a "cluster" argument of its own does not use the fixture.
    callspec = getattr(request.node, "callspec", None)
    if "cluster" not in request.fixturenames or (callspec and "cluster" in callspec.params):
        return
    test_cluster: clusters.TestCluster = request.getfixturevalue("cluster")
    if test_cluster.sim is not None and test_cluster.sim.control_plane is not None:
        test_cluster.sim.control_plane.check_running()


@pytest.fixture(scope="session")
def sim(cluster: clusters.TestCluster) -> sim_cluster.SimCluster:
    """The simulated cluster itself; skips against an existing cluster."""
    return cluster.simulation()


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


@pytest.fixture
def releases(
    cluster: clusters.TestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[lifecycle.Releases]:
    """Releases made by one test on a cluster without our CRDs; all removed afterwards (the
    lifecycle tests and benchmarks decide who owns the CRDs)."""
    api = cluster.api()
    lifecycle.remove_crds(api)
    made = lifecycle.Releases(cluster, tmp_path_factory.mktemp("releases"))
    try:
        yield made
    finally:
        made.cleanup()
        lifecycle.remove_crds(api)
