"""The cluster tests run against: the simulated one, or an existing one from a kubeconfig."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client, config

from cdsim import cluster as sim_cluster
from cdsim import controlplane, kubeconfig, tools


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
