"""The chart installs with `helm install --wait` (helm 3, then helm 4), works, and uninstalls.

Uses the production profile under values/sim.yaml on the session's lifecycle cluster (or
--chart-path / --app-config-file-path on an existing one): a whole release installed and
removed, twice, on two racks of four nodes. Its pods are Ready only when their probes pass.
The CRDs are cluster-scoped and kept on uninstall, so when an earlier install (this test's
other helm major, or another test) left them, this install leaves them alone with
crds.enabled=false, as the crds subchart documents for CRDs another release owns.
"""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import kubeconfig
from computedomains import waiting
from computedomains.api import constants
from tests.chart import rendering as r
from tests.support import clusters, helm, kube

pytestmark = pytest.mark.cluster

CRDS = (
    f"{constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP}",
    f"{constants.CLIQUE_PLURAL}.{constants.GROUP}",
)
DEVICE_CLASSES = (constants.CHANNEL_DEVICE_CLASS, constants.DAEMON_DEVICE_CLASS)


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except ApiException as exc:
        if kube.status_of(exc) == 404:
            return False
        raise
    return True


def _crd_exists(api: client.ApiClient, name: str) -> bool:
    extensions = client.ApiextensionsV1Api(api)
    return _exists(lambda: extensions.read_custom_resource_definition(name))


def _label_selector(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in selector.items())


def _release_objects(api: client.ApiClient, namespace: str, release: str) -> list[str]:
    """Every object of the release's kinds still labelled with the release (CRDs aside)."""
    selector = f"app.kubernetes.io/instance={release}"
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac, admission = client.RbacAuthorizationV1Api(api), client.AdmissionregistrationV1Api(api)
    resource, policy = client.ResourceV1Api(api), client.PolicyV1Api(api)
    listings: dict[str, Any] = {
        "DaemonSet": apps.list_namespaced_daemon_set(namespace, label_selector=selector),
        "Deployment": apps.list_namespaced_deployment(namespace, label_selector=selector),
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget(
            namespace, label_selector=selector
        ),
        "Service": core.list_namespaced_service(namespace, label_selector=selector),
        "ResourceClaimTemplate": resource.list_namespaced_resource_claim_template(
            namespace, label_selector=selector
        ),
        "Pod": core.list_namespaced_pod(namespace, label_selector=selector),
        "ServiceAccount": core.list_namespaced_service_account(namespace, label_selector=selector),
        "Role": rbac.list_namespaced_role(namespace, label_selector=selector),
        "RoleBinding": rbac.list_namespaced_role_binding(namespace, label_selector=selector),
        "ClusterRole": rbac.list_cluster_role(label_selector=selector),
        "ClusterRoleBinding": rbac.list_cluster_role_binding(label_selector=selector),
        "ValidatingAdmissionPolicy": admission.list_validating_admission_policy(
            label_selector=selector
        ),
        "ValidatingAdmissionPolicyBinding": admission.list_validating_admission_policy_binding(
            label_selector=selector
        ),
        "DeviceClass": resource.list_device_class(label_selector=selector),
    }
    return [f"{kind} {o.metadata.name}" for kind, lst in listings.items() for o in lst.items]


class _StillThere(Exception):
    """Objects of an uninstalled release that still exist."""


def _all_deleted(api: client.ApiClient, namespace: str, release: str) -> bool:
    left = _release_objects(api, namespace, release)
    if left:
        raise _StillThere(", ".join(left))
    return True


def _check_daemonset_covers_gpu_nodes(
    cluster: clusters.TestCluster, api: client.ApiClient, namespace: str, release: str
) -> client.V1DaemonSet:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    [ds] = apps.list_namespaced_daemon_set(
        namespace,
        label_selector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=kubelet-plugin",
    ).items
    selector = ds.spec.template.spec.node_selector
    gpu_nodes = {
        str(n.metadata.name) for n in core.list_node(label_selector=_label_selector(selector)).items
    }
    if cluster.sim is not None:
        assert gpu_nodes == {n.name for n in cluster.sim.nodes}, "every simulated node has GPUs"
    assert gpu_nodes, f"no node matches {selector}"
    assert ds.status.desired_number_scheduled == len(gpu_nodes)

    # `helm install --wait` counts a DaemonSet ready within its maxUnavailable, so the last
    # pods may still be coming up: wait for all of them.
    def all_ready() -> bool:
        status = apps.read_namespaced_daemon_set_status(ds.metadata.name, namespace).status
        return bool(status.number_ready == len(gpu_nodes))

    waiting.until(
        f"all {len(gpu_nodes)} kubelet-plugin pods Ready", all_ready, timeout=120, interval=0.5
    )
    pods = core.list_namespaced_pod(
        namespace, label_selector=_label_selector(ds.spec.selector.match_labels)
    ).items
    assert sorted(str(p.spec.node_name) for p in pods) == sorted(gpu_nodes), "one pod per node"
    for pod in pods:
        ready = kube.pod_condition(pod, "Ready")
        assert ready is not None and ready.status == "True", pod.metadata.name
        assert pod.metadata.labels["app.kubernetes.io/name"] == "compute-domains"
    return ds


def _check_rbac_and_device_classes(
    api: client.ApiClient, namespace: str, release: str, service_account: str
) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.read_namespaced_service_account(service_account, namespace)
    rbac.read_namespaced_role(service_account, namespace)
    rbac.read_namespaced_role_binding(service_account, namespace)
    assert (
        rbac.read_cluster_role(service_account).metadata.labels["app.kubernetes.io/instance"]
        == release
    )
    binding = rbac.read_cluster_role_binding(service_account)
    assert [(s.name, s.namespace) for s in binding.subjects] == [(service_account, namespace)]
    resource = client.ResourceV1Api(api)
    for name in DEVICE_CLASSES:
        labels = resource.read_device_class(name).metadata.labels
        assert labels["app.kubernetes.io/instance"] == release


def _check_admission_policies(api: client.ApiClient, release: str) -> None:
    """Every policy is bound, and the API server type-checked its CEL without warnings."""
    admission = client.AdmissionregistrationV1Api(api)
    selector = f"app.kubernetes.io/instance={release}"
    policies = admission.list_validating_admission_policy(label_selector=selector).items
    bindings = admission.list_validating_admission_policy_binding(label_selector=selector).items
    assert len(policies) == 7
    assert {b.spec.policy_name for b in bindings} == {p.metadata.name for p in policies}

    def type_checked() -> list[Any] | None:
        checked = []
        for p in policies:
            status = admission.read_validating_admission_policy(p.metadata.name).status
            if status is None or status.observed_generation != p.metadata.generation:
                return None
            checked.append(status)
        return checked

    checked = waiting.until(
        "the API server to type-check the admission policies",
        type_checked,
        timeout=60,
        interval=0.5,
    )
    for status in checked:
        warnings = status.type_checking.expression_warnings if status.type_checking else None
        assert not warnings, warnings


def _refusal(call: Callable[[], Any]) -> str | None:
    """None when ``call`` succeeds, else the API server's message."""
    try:
        call()
    except ApiException as exc:
        return f"{exc.status} {exc.body}"
    return None


def _check_writes_are_confined_to_the_own_node(
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    ds: client.V1DaemonSet,
    tmp_path: pathlib.Path,
) -> None:
    """With a token bound to its pod on node A, the plugin may write A's slices and Node only.

    Every write is a dry run: admission runs, nothing is stored.
    """
    sa = ds.spec.template.spec.service_account_name
    pods = (
        client.CoreV1Api(api)
        .list_namespaced_pod(
            namespace, label_selector=_label_selector(ds.spec.selector.match_labels)
        )
        .items
    )
    pod = sorted(pods, key=lambda p: str(p.spec.node_name))[0]
    own = pod.spec.node_name
    other = next(p.spec.node_name for p in pods if p.spec.node_name != own)

    def as_sa(bound: bool) -> client.ApiClient:
        path = kubeconfig.for_service_account(
            cluster.kubeconfig,
            tmp_path / f"{sa}-{bound}.kubeconfig",
            namespace=namespace,
            service_account=sa,
            bound_pod=(pod.metadata.name, pod.metadata.uid) if bound else None,
        )
        return clusters.typed_client(path)

    plugin, unbound = as_sa(bound=True), as_sa(bound=False)

    def slice_for(node: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-{constants.DRIVER_NAME}-"},
            "spec": {
                "driver": constants.DRIVER_NAME,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [],
            },
        }

    def write_slice(who: client.ApiClient, node: str) -> str | None:
        return _refusal(
            lambda: client.ResourceV1Api(who).create_resource_slice(slice_for(node), dry_run="All")
        )

    def label_node(who: client.ApiClient, node: str) -> str | None:
        patch = {"metadata": {"labels": {constants.COMPUTE_DOMAIN_LABEL: "probe"}}}
        return _refusal(
            lambda: client.CoreV1Api(who).patch_node(
                node, patch, dry_run="All", _content_type="application/merge-patch+json"
            )
        )

    # The policies take effect once the API server's admission informers have seen them.
    def refused_by_policy() -> str | None:
        refusal = write_slice(plugin, other)
        return refusal if refusal and "may only write ResourceSlices" in refusal else None

    refusal: str | None = waiting.until(
        "the admission policy to refuse a slice of another node",
        refused_by_policy,
        timeout=60,
        interval=0.5,
    )
    assert refusal is not None
    assert f"may only write ResourceSlices of its own node (spec.nodeName: {own})" in refusal
    assert f"not spec.nodeName: {other}" in refusal
    assert write_slice(plugin, own) is None
    refusal = label_node(plugin, other)
    assert refusal is not None and f"may only change their own Node object, not node {other}" in (
        refusal
    )
    assert label_node(plugin, own) is None
    refusal = write_slice(unbound, own)
    assert refusal is not None and "this request's token names no node" in refusal


def _component_pods(
    api: client.ApiClient, namespace: str, release: str, component: str
) -> list[Any]:
    return list(
        client.CoreV1Api(api)
        .list_namespaced_pod(
            namespace,
            label_selector=f"app.kubernetes.io/instance={release},"
            f"app.kubernetes.io/component={component}",
        )
        .items
    )


def _check_controller_runs_two_replicas(
    api: client.ApiClient, namespace: str, release: str
) -> None:
    apps = client.AppsV1Api(api)
    [deployment] = apps.list_namespaced_deployment(
        namespace,
        label_selector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=controller",
    ).items
    assert deployment.spec.replicas == 2
    assert deployment.status.ready_replicas == 2, "helm --wait waited for both"
    [pdb] = (
        client.PolicyV1Api(api)
        .list_namespaced_pod_disruption_budget(
            namespace,
            label_selector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=controller",
        )
        .items
    )
    assert pdb.spec.max_unavailable == 1


def _check_agents_claim_their_nodes_daemon_device(
    api: client.ApiClient, namespace: str, release: str
) -> None:
    """One Ready agent pod per clique node: each one's daemon claim was allocated and prepared.

    The clique labels come from node-init after the install, so this waits for them.
    """
    core = client.CoreV1Api(api)

    def every_clique_node_has_a_ready_agent() -> dict[str, str] | None:
        nodes = {
            str(n.metadata.name)
            for n in core.list_node(label_selector=constants.CLIQUE_LABEL).items
        }
        pods = _component_pods(api, namespace, release, "imex-agent")
        ready = {
            str(p.spec.node_name): str(p.metadata.name)
            for p in pods
            if (c := kube.pod_condition(p, "Ready")) is not None and c.status == "True"
        }
        return ready if nodes and set(ready) == nodes and len(pods) == len(nodes) else None

    ready = waiting.until(
        "an IMEX agent pod Ready on every node of a clique",
        every_clique_node_has_a_ready_agent,
        timeout=240,
        interval=2,
    )
    pod = core.read_namespaced_pod(next(iter(ready.values())), namespace)
    [status] = pod.status.resource_claim_statuses or []
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(
        status.resource_claim_name, namespace
    )
    [result] = claim.status.allocation.devices.results or []
    assert (result.driver, result.pool, result.device) == (
        constants.DRIVER_NAME,
        pod.spec.node_name,
        "daemon-0",
    )


def _check_agent_and_controller_writes_are_confined(
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    release: str,
    tmp_path: pathlib.Path,
) -> None:
    """An agent may update its own pod's status only; the controller only the domain label.

    Every write is a dry run: admission runs, nothing is stored.
    """
    agents = sorted(
        _component_pods(api, namespace, release, "imex-agent"), key=lambda p: str(p.metadata.name)
    )
    [controller, *_] = _component_pods(api, namespace, release, "controller")

    def bound(pod: Any) -> client.ApiClient:
        sa = pod.spec.service_account_name
        path = kubeconfig.for_service_account(
            cluster.kubeconfig,
            tmp_path / f"{pod.metadata.name}.kubeconfig",
            namespace=namespace,
            service_account=sa,
            bound_pod=(pod.metadata.name, pod.metadata.uid),
        )
        return clusters.typed_client(path)

    agent, other = agents[0], agents[1]
    as_agent = client.CoreV1Api(bound(agent))
    condition = {
        "status": {
            "conditions": [
                {
                    "type": "computedomains.io/IMEXReady",
                    "status": "False",
                    "reason": "Idle",
                    "message": "domain : ",
                }
            ]
        }
    }

    def patch_status(name: str) -> str | None:
        return _refusal(
            lambda: as_agent.patch_namespaced_pod_status(
                name,
                namespace,
                condition,
                dry_run="All",
                _content_type="application/strategic-merge-patch+json",
            )
        )

    def refused_by_policy() -> str | None:
        refusal = patch_status(other.metadata.name)
        return (
            refusal if refusal and "may only update the status of its own pod" in refusal else None
        )

    refusal = waiting.until(
        "the admission policy to refuse an agent writing another pod's status",
        refused_by_policy,
        timeout=60,
        interval=0.5,
    )
    assert f"of pod {other.metadata.name}" in refusal
    assert patch_status(agent.metadata.name) is None

    as_controller = client.CoreV1Api(bound(controller))
    node = str(agent.spec.node_name)

    def label_node(key: str) -> str | None:
        patch = {"metadata": {"labels": {key: None}}}
        return _refusal(
            lambda: as_controller.patch_node(
                node, patch, dry_run="All", _content_type="application/merge-patch+json"
            )
        )

    node_refusal = label_node(constants.CLIQUE_LABEL)
    assert node_refusal is not None and "may change only the label" in node_refusal, node_refusal
    assert label_node(constants.COMPUTE_DOMAIN_LABEL) is None


@pytest.fixture(scope="module")
def cluster(lifecycle_cluster: clusters.TestCluster) -> clusters.TestCluster:
    """A whole release per helm major: on the smaller lifecycle cluster."""
    return lifecycle_cluster


@pytest.mark.parametrize("major", r.MAJORS)
def test_helm_install_wait_check_and_uninstall(
    major: str,
    cluster: clusters.TestCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
    values_file_path: str,
) -> None:
    # values_file_path: pytest-helm-charts' fixture (--app-config-file-path or its ATS_*
    # variable). The chart: from the simulated cluster's registry by OCI reference, or
    # --chart-path/--chart-version against an existing cluster (clusters.TestCluster.chart).
    h = r.helm_for(major, tmp_path / "helm", kubeconfig=cluster.kubeconfig)
    release = f"cd-{major}"
    values = ["--values", str(values_file_path)] if values_file_path else r.sim_values()
    kept_before = {name for name in CRDS if _crd_exists(api, name)}
    args = ["--namespace", namespace, *values, "--wait", "--timeout", "10m"]
    if kept_before:
        args += ["--set", "crds.enabled=false"]

    try:
        h.run("install", release, *cluster.chart(), *args, timeout=700)
        ds = _check_daemonset_covers_gpu_nodes(cluster, api, namespace, release)
        sa = ds.spec.template.spec.service_account_name
        _check_rbac_and_device_classes(api, namespace, release, sa)
        _check_admission_policies(api, release)
        _check_writes_are_confined_to_the_own_node(cluster, api, namespace, ds, tmp_path)
        _check_controller_runs_two_replicas(api, namespace, release)
        if cluster.simulated:
            _check_agents_claim_their_nodes_daemon_device(api, namespace, release)
            _check_agent_and_controller_writes_are_confined(
                cluster, api, namespace, release, tmp_path
            )
        assert all(_crd_exists(api, name) for name in CRDS)

        h.run("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "2m")
        waiting.until(
            f"every object of release {release} to be deleted",
            lambda: _all_deleted(api, namespace, release),
            timeout=60,
            interval=1,
            retry_on=(_StillThere,),
        )
        assert h.run("list", "--namespace", namespace, "--short").strip() == ""
        for name in CRDS:  # kept by helm.sh/resource-policy, whoever installed them
            assert _crd_exists(api, name), name
    finally:
        _uninstall_quietly(h, release, namespace)


def _uninstall_quietly(h: helm.Helm, release: str, namespace: str) -> None:
    """Leave no release behind after a failure: its DeviceClasses would block the next install."""
    with contextlib.suppress(AssertionError):
        h.run("uninstall", release, "--namespace", namespace, "--ignore-not-found", "--wait")
