"""The cluster tests run against: the simulated one, or an existing one from a kubeconfig."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client, config

from cdsim import cluster as sim_cluster
from cdsim import controlplane, kubeconfig, publish, tools
from cdsim.image import cache as image_cache
from tests.support import previous

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
CHART = REPOSITORY / "chart"
PUBLIC_BUSYBOX = "busybox:1.37"


def typed_client(kubeconfig_path: pathlib.Path) -> client.ApiClient:
    """The official client, for tests: its typed APIs make test code short and readable."""
    api: client.ApiClient = config.new_client_from_config(config_file=str(kubeconfig_path))  # type: ignore[no-untyped-call]
    return api


@contextlib.contextmanager
def api_server_alone(
    directory: pathlib.Path, *args: str, health: str = "readyz"
) -> Iterator[controlplane.ControlPlane]:
    """An API server and its etcd, nothing else, started with ``args``, for the ``with`` block.

    For what talks to the API server only (a hook against an API server this release cannot
    run on, a migration benchmark that should not share the two cores with simulated nodes).
    ``health`` is the endpoint awaited: ``livez`` for one that answers but never gets ready.
    """
    binaries = controlplane.Binaries.from_tools(
        tools.ToolBox.from_env().ensure_all(["etcd", "kubernetes", "kwok"])
    )
    plane = controlplane.ControlPlane(
        directory=directory / "control-plane", binaries=binaries, name="alone", log=lambda _: None
    )
    try:
        plane.start_api_server(extra_args=args, health=health)
        yield plane
    finally:
        plane.stop()


@dataclasses.dataclass
class TestCluster:
    """What a test needs from a cluster, whichever kind it is."""

    __test__ = False  # not a test class, despite the name

    kubeconfig: pathlib.Path
    workdir: pathlib.Path
    sim: sim_cluster.SimCluster | None = None
    chart_path: pathlib.Path | None = None
    chart_version: str | None = None
    values_file: pathlib.Path | None = None
    chart_values: tuple[str, ...] = ()
    """Helm arguments every chart of this cluster is installed with (:meth:`chart`,
    :meth:`chart_from`, :meth:`previous_chart`): what a user sets for a cluster of its size."""
    published: publish.Published | None = dataclasses.field(default=None, init=False)
    """This build in the simulated cluster's registry, once :meth:`chart` published it."""
    workload: str | None = dataclasses.field(default=None, init=False)
    """The workload image's reference there, once :meth:`workload_image` pushed it."""

    def chart(self) -> list[str]:
        """This build's chart as ``helm install|upgrade RELEASE`` takes it.

        On the simulated cluster: the image and the packaged chart published to the cluster's
        registry (on first use), installed by ``oci://`` reference with ``image.repository``
        there, as a user installs from theirs. Against an existing cluster: ``--chart-path``
        (else this checkout's chart) at ``--chart-version``.
        """
        if self.sim is None:
            version = ["--version", self.chart_version] if self.chart_version else []
            return [str(self.chart_path or CHART), *version, *self.chart_values]
        if self.published is None:
            self.published = publish.publish_build(
                helm=tools.ToolBox.from_env().path("helm3"),
                registry=self.registry(),
                chart_dir=CHART,
                log=lambda _: None,
            )
        return [*self.published.chart_args(), *self.chart_values]

    def version(self) -> str:
        """The version :meth:`chart` installs: this build's (the chart's ``version`` and
        ``appVersion``, the image tag), or ``--chart-version`` against an existing cluster."""
        self.chart()
        if self.published is None:
            chart = yaml.safe_load(((self.chart_path or CHART) / "Chart.yaml").read_text())
            return self.chart_version or str(chart["version"])
        return self.published.version

    def image(self) -> str:
        """This build's image in the simulated cluster's registry (published with :meth:`chart`
        on first use), as a pod names it."""
        self.simulation()
        self.chart()
        assert self.published is not None
        return f"{self.published.image_repository}:{self.published.version}"

    def workload_image(self) -> str:
        """An image with a shell, as a pod names it: the workload image (busybox) in the
        simulated cluster's registry, pushed on first use; a public busybox against an existing
        cluster."""
        if self.sim is None:
            return PUBLIC_BUSYBOX
        if self.workload is None:
            registry = self.registry()
            self.workload = publish.publish_workload(registry=registry, log=lambda _: None)
        return self.workload

    def chart_from(self, chart_dir: pathlib.Path, *, version: str) -> list[str]:
        """A changed copy of this chart, published to the simulated cluster's registry as a
        later release would be: the chart at ``version`` and this build's image tagged
        ``version`` too. Referenced as :meth:`chart` is."""
        build, _ = image_cache.ImageCache.from_env(REPOSITORY).ensure()
        return publish.publish_build(
            helm=tools.ToolBox.from_env().path("helm3"), registry=self.registry(),
            chart_dir=chart_dir, log=lambda _: None, build=build, version=version,
        ).chart_args() + list(self.chart_values)  # fmt: skip

    def previous_chart(self, release: previous.PreviousRelease) -> list[str]:
        """A previous release's chart and image published to the simulated cluster's registry
        (:func:`previous.publish`), referenced as :meth:`chart` is."""
        helm = tools.ToolBox.from_env().path("helm3")
        return [*previous.publish(release, self.registry(), helm), *self.chart_values]

    def registry(self) -> str:
        """The simulated cluster's OCI registry (``127.0.0.1:PORT``)."""
        control_plane = self.simulation().control_plane
        assert control_plane is not None, "the simulated cluster is not running"
        return control_plane.registry

    @property
    def simulated(self) -> bool:
        """True for the simulated cluster (nodes and host trees are ours)."""
        return self.sim is not None

    def simulation(self) -> sim_cluster.SimCluster:
        """The simulated cluster itself; skips the test against an existing cluster."""
        if self.sim is None:
            pytest.skip(
                "needs the simulated GB200 nodes and host trees; --kubeconfig names a real cluster"
            )
        return self.sim

    def api(self) -> client.ApiClient:
        """A new admin API client."""
        return typed_client(self.kubeconfig)

    def service_account_kubeconfig(self, namespace: str, name: str) -> pathlib.Path:
        """A kubeconfig authenticating as ServiceAccount ``namespace/name``."""
        dest = self.workdir / "sa" / f"{namespace}.{name}.{uuid.uuid4().hex[:6]}.kubeconfig"
        return kubeconfig.for_service_account(
            self.kubeconfig, dest, namespace=namespace, service_account=name
        )

    def service_account_api(self, namespace: str, name: str) -> client.ApiClient:
        """An API client authenticated as ServiceAccount ``namespace/name``."""
        return typed_client(self.service_account_kubeconfig(namespace, name))
