"""The hooks as processes against a real API server, with an admin kubeconfig.

The same programs run as the chart's hook Jobs; here they run locally, so these tests need no
chart and no simulated kubelet: what is asserted is what they print and what they change.
"""

from __future__ import annotations

import functools
import pathlib
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from cdsim import tools
from computedomains import waiting
from computedomains.api import constants
from computedomains.hooks import ownership
from tests.support import clusters, helm, kube, lifecycle
from tests.support import migration as mig

pytestmark = pytest.mark.cluster

CRDS_CHART = pathlib.Path(__file__).parents[2] / "chart" / "charts" / "crds"
INCUMBENT = {
    ownership.RELEASE_NAME_ANNOTATION: "nvidia-dra-driver-gpu",
    ownership.RELEASE_NAMESPACE_ANNOTATION: "nvidia",
}


def hook(cluster: clusters.TestCluster, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``computedomains hooks <name>`` as the admin, its output captured."""
    return subprocess.run(
        mig.hook(cluster.kubeconfig, name, *args),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _preflight(
    cluster: clusters.TestCluster, namespace: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """The preflight hook for release ``cd`` in ``namespace``."""
    return hook(cluster, "preflight", "--namespace", namespace, "--release", "cd", *args)


@pytest.fixture(scope="module")
def incumbent_crds(
    cluster: clusters.TestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """Our CRDs as an incumbent Helm release left them (its release annotations); removed after."""
    ext = client.ApiextensionsV1Api(cluster.api())
    lifecycle.remove_crds(cluster.api())  # earlier modules' CRDs: this one decides the owner
    h = helm.Helm(
        binary=tools.ToolBox.from_env().path("helm3"),
        kubeconfig=cluster.kubeconfig,
        home=tmp_path_factory.mktemp("helm"),
    )
    docs = [d for d in yaml.safe_load_all(h.run("template", "crds", str(CRDS_CHART))) if d]
    for doc in docs:
        doc["metadata"]["labels"] = {ownership.MANAGED_BY_LABEL: "Helm"}
        doc["metadata"]["annotations"] = dict(INCUMBENT)
        ext.create_custom_resource_definition(doc)
    for name in ownership.CRD_NAMES:
        waiting.until(
            f"CRD {name} Established",
            functools.partial(kube.crd_established, ext, name),
            timeout=30,
        )
    yield list(ownership.CRD_NAMES)
    for name in ownership.CRD_NAMES:
        ext.delete_custom_resource_definition(name)
    for name in ownership.CRD_NAMES:
        waiting.until(
            f"CRD {name} deleted", functools.partial(kube.crd_gone, ext, name), timeout=60
        )


def test_preflight_on_a_fresh_cluster_passes_and_prints_the_placement_path(
    cluster: clusters.TestCluster, namespace: str
) -> None:
    lifecycle.remove_crds(cluster.api())  # a fresh cluster has none of ours
    done = _preflight(cluster, namespace)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "preflight: Kubernetes v1." in out and ": supported" in out
    assert "preflight: resource.k8s.io/v1 served" in out
    assert f"preflight: CustomResourceDefinition {ownership.CRD_NAMES[0]}: not there yet" in out
    assert "preflight: INFO: placement: " in out
    # The simulated nodes have their driver (and NVML) under / and no GPU operator label.
    assert "preflight: driverRoot /: consistent with the GPU nodes' driver labels" in out
    assert out.rstrip().endswith("preflight: passed")


def test_preflight_refuses_crds_of_another_release_and_adopts_them(
    cluster: clusters.TestCluster, namespace: str, incumbent_crds: list[str]
) -> None:
    refused = _preflight(cluster, namespace)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        f"preflight: FAILED: CustomResourceDefinition {incumbent_crds[0]} is owned by another Helm "
        "release ('nvidia-dra-driver-gpu' in namespace nvidia): this chart would take it over"
    ) in refused.stdout
    assert "preflight:   fix: set adopt.enabled=true" in refused.stdout
    adopted = _preflight(cluster, namespace, "--adopt")
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    assert f"preflight: adopted CustomResourceDefinition {incumbent_crds[0]}" in adopted.stdout
    ext = client.ApiextensionsV1Api(cluster.api())
    for name in incumbent_crds:
        annotations = ext.read_custom_resource_definition(name).metadata.annotations
        assert annotations[ownership.RELEASE_NAME_ANNOTATION] == "cd"
        assert annotations[ownership.RELEASE_NAMESPACE_ANNOTATION] == namespace
    again = _preflight(cluster, namespace)
    assert again.returncode == 0, again.stdout  # adopted: ours now, nothing to refuse


def _node_with_our_marks(api: client.ApiClient) -> str:
    core = client.CoreV1Api(api)
    node = core.list_node().items[0].metadata.name
    core.patch_node(
        node,
        {
            "metadata": {
                "labels": {constants.COMPUTE_DOMAIN_LABEL: "uid-1", constants.CLIQUE_LABEL: "u.1"}
            },
            "spec": {"taints": [{"key": constants.FABRIC_TAINT, "effect": "NoSchedule"}]},
        },
    )
    condition = {
        "type": constants.FABRIC_CONDITION,
        "status": "True",
        "reason": "FabricHealthy",
        "message": "test",
    }
    core.patch_node_status(node, {"status": {"conditions": [condition]}})
    return str(node)


def _domain(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    got = custom.get_namespaced_custom_object(
        constants.GROUP, constants.STORAGE_VERSION, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
    )
    assert isinstance(got, dict)
    return got


def test_uninstall_refuses_with_a_live_domain_and_force_cleans_up(
    cluster: clusters.TestCluster, namespace: str, incumbent_crds: list[str]
) -> None:
    api = cluster.api()
    custom = client.CustomObjectsApi(api)
    name = f"cd-{uuid.uuid4().hex[:6]}"
    # At the storage version: no conversion webhook runs here.
    custom.create_namespaced_custom_object(
        constants.GROUP,
        constants.STORAGE_VERSION,
        namespace,
        constants.COMPUTE_DOMAIN_PLURAL,
        {
            "apiVersion": constants.API_VERSION_V1BETA2,
            "kind": constants.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": name, "finalizers": [constants.FINALIZER]},
            "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
        },
    )
    # Unscheduled (no driver here), so not finished: it counts as the domain's running pod.
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "worker-0"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "resourceClaims": [
                    {"name": "channel", "resourceClaimTemplateName": f"{name}-channel"}
                ],
                "nodeSelector": {"compute-domains.test/nowhere": "true"},
            },
        },
    )
    node = _node_with_our_marks(api)
    refused = hook(cluster, "uninstall", "--namespace", namespace, "--release", "cd")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        "uninstall: FAILED: 1 ComputeDomain(s) have running pods: "
        f"{namespace}/{name} (pods: worker-0)" in refused.stdout
    )
    assert "uninstall: refused: nothing was changed" in refused.stdout
    assert _domain(api, namespace, name)["metadata"]["finalizers"] == [constants.FINALIZER]

    forced = hook(cluster, "uninstall", "--namespace", namespace, "--release", "cd", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"removed finalizer {constants.FINALIZER}" in forced.stdout
    assert "kubectl delete crd computedomains.resource.nvidia.com" in forced.stdout
    assert not _domain(api, namespace, name)["metadata"].get("finalizers")
    n = client.CoreV1Api(api).read_node(node)
    labels = n.metadata.labels or {}
    assert constants.COMPUTE_DOMAIN_LABEL not in labels
    assert constants.CLIQUE_LABEL not in labels
    assert not [t for t in n.spec.taints or [] if t.key == constants.FABRIC_TAINT]
    assert not [c for c in n.status.conditions or [] if c.type == constants.FABRIC_CONDITION]
    again = hook(cluster, "uninstall", "--namespace", namespace, "--release", "cd", "--force")
    assert again.returncode == 0 and "node " not in again.stdout.replace(
        "nodes", ""
    )  # nothing left
