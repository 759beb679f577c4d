"""The previous release's chart runs the previous release's image in the simulated cluster.

The upgrade tests start from it: its image is built from that release's commit and pushed to
the cluster's registry with its chart (tests/support/previous.py); its pods pull and run it.
"""

from __future__ import annotations

import json
import pathlib

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import processes, tools
from computedomains import waiting
from computedomains.api import constants
from tests.support import clusters, helm, kube, previous

pytestmark = pytest.mark.cluster

RELEASE = "cd-previous"


@pytest.fixture(scope="session")
def previous_release() -> previous.PreviousRelease:
    """The previous release, built once per commit into the tools' cache."""
    return previous.build()


def _crd_names() -> list[str]:
    return [
        f"{constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP}",
        f"{constants.CLIQUE_PLURAL}.{constants.GROUP}",
    ]


def test_the_previous_chart_runs_the_previous_image(
    previous_release: previous.PreviousRelease,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    extensions = client.ApiextensionsV1Api(api)
    existing = {c.metadata.name for c in extensions.list_custom_resource_definition().items}
    ours = set(_crd_names())
    node = sim.nodes[0].name
    h = helm.Helm(binary=tools.ToolBox.from_env().path("helm3"), kubeconfig=cluster.kubeconfig,
                  home=tmp_path / "helm")  # fmt: skip
    args = [
        "--namespace", namespace, "--values", str(previous_release.profile("sim")),
        # One node's plugin and one controller: enough to see whose code runs.
        "--set-json", f"kubeletPlugin.nodeSelector={json.dumps({'kubernetes.io/hostname': node})}",
        "--set", "controller.replicas=1", "--set", "imexAgent.enabled=false",
        "--set", f"crds.enabled={str(not ours & existing).lower()}",
        "--wait", "--timeout", "4m",
    ]  # fmt: skip
    h.run("install", RELEASE, *cluster.previous_chart(previous_release), *args, timeout=300)
    try:
        (pod,) = (
            client.CoreV1Api(api)
            .list_namespaced_pod(
                namespace, label_selector=f"{constants.COMPONENT_LABEL}=controller"
            )
            .items
        )
        image = previous_release.image.index
        assert previous_release.image.revision == previous_release.commit
        assert pod.spec.containers[0].image.endswith(f"@{image}")
        (status,) = pod.status.container_statuses or []
        assert status.image_id.endswith(f"@{image}") or status.image_id == image, status
        tree = sim.host_trees[pod.spec.node_name].root
        pid = waiting.until(
            "the previous release's controller process",
            lambda: kube.find_process("controller", under=tree),
            timeout=60,
        )
        assert processes.pid_alive(pid)
    finally:
        h.run("uninstall", RELEASE, "--namespace", namespace, "--wait", "--timeout", "2m")
        if not ours & existing:  # kept by their resource policy; only ours to remove
            for name in _crd_names():
                extensions.delete_custom_resource_definition(name)
