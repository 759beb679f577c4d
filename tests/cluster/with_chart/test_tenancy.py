"""Tenancy with the chart installed: the API server itself refuses what a tenant or a node's
plugin token must not do, and says why.

- Nobody outside the release namespace may claim the daemon DeviceClass (the node's IMEX
  management device): not by a ResourceClaim, not by a template, not as a firstAvailable
  subrequest.
- The kubelet plugin's token (node-init shares it) may change only its own node's labels
  `resource.nvidia.com/computeDomain` and `nvidia.com/gpu.clique`, the `NVLinkFabricReady`
  condition and the fabric taint, and write only slices of its driver in its own node's pool.

RBAC grants every one of these writes (checked by access review), so each refusal is the
admission policies' doing. Every write is a dry run: admission runs, nothing is stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import kubeconfig
from computedomains import waiting
from computedomains.api import constants
from tests.cluster.with_chart.conftest import RELEASE
from tests.support import clusters, kube

pytestmark = pytest.mark.cluster

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


def _refusal(call: Callable[[], Any]) -> str | None:
    """None when ``call`` is admitted, else the API server's status and message."""
    try:
        call()
    except ApiException as exc:
        return f"{exc.status} {json.loads(exc.body)['message']}"
    return None


def _refused_by_policy(call: Callable[[], Any], policy: str) -> str:
    """The refusal of ``call`` by ``policy``, once the API server has loaded the policy."""

    def refused() -> str | None:
        refusal = _refusal(call)
        return refusal if refusal and f"ValidatingAdmissionPolicy '{policy}'" in refusal else None

    message: str = waiting.until(
        f"ValidatingAdmissionPolicy {policy} to refuse the request", refused, timeout=60
    )
    assert message.startswith("403 "), message
    return message


# -- the daemon DeviceClass ---------------------------------------------------------------


def _policy(suffix: str) -> str:
    """The name of the release's policy ``<fullname>-<suffix>``."""
    return f"{RELEASE}-compute-domains-{suffix}"


def _devices(device_class: str, *, first_available: bool) -> dict[str, Any]:
    request: dict[str, Any]
    if first_available:
        request = {
            "name": "imex",
            "firstAvailable": [
                {"name": "channel", "deviceClassName": constants.CHANNEL_DEVICE_CLASS},
                {"name": "daemon", "deviceClassName": device_class},
            ],
        }
    else:
        request = {"name": "imex", "exactly": {"deviceClassName": device_class}}
    return {"devices": {"requests": [request]}}


def _create(
    api: client.ApiClient, namespace: str, kind: str, devices: dict[str, Any]
) -> Callable[[], Any]:
    resource = client.ResourceV1Api(api)
    if kind == "ResourceClaimTemplate":
        body = {"metadata": {"name": "imex"}, "spec": {"spec": devices}}
        return lambda: resource.create_namespaced_resource_claim_template(
            namespace, body, dry_run="All"
        )
    body = {"metadata": {"name": "imex"}, "spec": devices}
    return lambda: resource.create_namespaced_resource_claim(namespace, body, dry_run="All")


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
@pytest.mark.parametrize("first_available", [False, True], ids=["exactly", "firstAvailable"])
def test_daemon_class_claim_in_a_user_namespace_is_rejected_with_the_reason(
    chart: str, api: client.ApiClient, namespace: str, kind: str, first_available: bool
) -> None:
    policy = _policy("daemon-device-class")
    daemon = _devices(constants.DAEMON_DEVICE_CLASS, first_available=first_available)
    message = _refused_by_policy(_create(api, namespace, kind, daemon), policy)
    assert f"{kind} {namespace}/imex: request imex asks for DeviceClass " in message
    assert f"{constants.DAEMON_DEVICE_CLASS}, which only the compute-domains IMEX agent" in message
    assert f"in namespace {chart} may claim" in message  # the reason
    assert "spec.channel.resourceClaimTemplate.name" in message  # the fix
    # The policy refuses the class, not claims: the channel class passes in the same namespace,
    # and the daemon class in the release namespace, where the agent's template lives.
    channel = _devices(constants.CHANNEL_DEVICE_CLASS, first_available=first_available)
    assert _refusal(_create(api, namespace, kind, channel)) is None
    assert _refusal(_create(api, chart, kind, daemon)) is None


@pytest.mark.parametrize("kind", ["ResourceClaim", "ResourceClaimTemplate"])
@pytest.mark.parametrize("devices", [{}, {"devices": {}}], ids=["no-devices", "no-requests"])
def test_a_claim_without_device_requests_passes_the_daemon_class_policy(
    chart: str, api: client.ApiClient, namespace: str, kind: str, devices: dict[str, Any]
) -> None:
    """Found by generated input: a claim template with an empty spec was refused with the
    policy's evaluation error (its requests are null to the policy, not absent)."""
    assert _refusal(_create(api, namespace, kind, devices)) is None


# -- the kubelet plugin's token -----------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_token(
    cluster: clusters.TestCluster, chart: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[client.ApiClient, str, str]]:
    """A client with a token bound to the plugin pod on one node; that node and another."""
    api = cluster.api()
    pods = sorted(
        client.CoreV1Api(api)
        .list_namespaced_pod(chart, label_selector="app.kubernetes.io/component=kubelet-plugin")
        .items,
        key=lambda p: str(p.spec.node_name),
    )
    pod, other = pods[0], pods[1]
    path = kubeconfig.for_service_account(
        cluster.kubeconfig,
        tmp_path_factory.mktemp("tenancy") / "plugin.kubeconfig",
        namespace=chart,
        service_account=pod.spec.service_account_name,
        bound_pod=(pod.metadata.name, pod.metadata.uid),
    )
    rbac = [("", "nodes", "", "patch"), ("", "nodes", "status", "patch")]
    rbac += [("resource.k8s.io", "resourceslices", "", "create")]
    for rule in rbac:
        assert kube.service_account_may(
            api, chart, pod.spec.service_account_name, rule, in_namespace=""
        ), rule
    yield clusters.typed_client(path), str(pod.spec.node_name), str(other.spec.node_name)


def _label(who: client.ApiClient, node: str, key: str) -> Callable[[], Any]:
    patch = {"metadata": {"labels": {key: "tenancy-probe"}}}
    core = client.CoreV1Api(who)
    return lambda: core.patch_node(node, patch, dry_run="All", _content_type=MERGE)


def _condition(who: client.ApiClient, node: str, kind: str) -> Callable[[], Any]:
    condition = {"type": kind, "status": "False", "reason": "Probe", "message": "tenancy probe"}
    patch = {"status": {"conditions": [condition]}}
    core = client.CoreV1Api(who)
    return lambda: core.patch_node_status(node, patch, dry_run="All", _content_type=STRATEGIC)


def _add_taint(
    who: client.ApiClient, api: client.ApiClient, node: str, taint: dict[str, str]
) -> Callable[[], Any]:
    # Node taints are one list: the patch carries the ones already there, as node-init's does.
    taints = client.CoreV1Api(api).read_node(node).spec.taints
    current = api.sanitize_for_serialization(taints)  # type: ignore[no-untyped-call]
    patch = {"spec": {"taints": [*(current or []), taint]}}
    core = client.CoreV1Api(who)
    return lambda: core.patch_node(node, patch, dry_run="All", _content_type=MERGE)


def _slice(who: client.ApiClient, node: str, *, driver: str, pool: str) -> Callable[[], Any]:
    body = {
        "metadata": {"generateName": f"{node}-tenancy-"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }
    resource = client.ResourceV1Api(who)
    return lambda: resource.create_resource_slice(body, dry_run="All")


def test_plugin_token_may_set_only_its_own_labels_on_its_own_node(
    chart: str, api: client.ApiClient, plugin_token: tuple[client.ApiClient, str, str]
) -> None:
    plugin, own, other = plugin_token
    policy = _policy("kubelet-plugin-node")
    message = _refused_by_policy(_label(plugin, own, "example.com/tenant"), policy)
    assert (
        "may change only the labels resource.nvidia.com/computeDomain, nvidia.com/gpu.clique "
        f"of node {own}, not example.com/tenant"
    ) in message
    message = _refused_by_policy(_label(plugin, other, constants.COMPUTE_DOMAIN_LABEL), policy)
    assert f"on node {own} may only change their own Node object, not node {other}" in message
    for key in (constants.COMPUTE_DOMAIN_LABEL, constants.CLIQUE_LABEL):
        assert _refusal(_label(plugin, own, key)) is None, key


def test_plugin_token_may_set_only_the_fabric_condition_and_taint(
    chart: str, api: client.ApiClient, plugin_token: tuple[client.ApiClient, str, str]
) -> None:
    plugin, own, _ = plugin_token
    policy = _policy("kubelet-plugin-node")
    message = _refused_by_policy(_condition(plugin, own, "Ready"), policy)
    assert f"may change only the condition NVLinkFabricReady of node {own}, not Ready" in message
    assert _refusal(_condition(plugin, own, constants.FABRIC_CONDITION)) is None

    evict = {"key": constants.FABRIC_TAINT, "effect": "NoExecute"}
    message = _refused_by_policy(_add_taint(plugin, api, own, evict), policy)
    assert f"only the taint {constants.FABRIC_TAINT}:NoSchedule of node {own}" in message
    cordon = {"key": constants.FABRIC_TAINT, "effect": "NoSchedule"}
    assert _refusal(_add_taint(plugin, api, own, cordon)) is None


def test_plugin_token_may_write_only_slices_of_its_driver_and_pool(
    chart: str, api: client.ApiClient, plugin_token: tuple[client.ApiClient, str, str]
) -> None:
    plugin, own, other = plugin_token
    policy = _policy("kubelet-plugin-slices")
    driver = constants.DRIVER_NAME
    message = _refused_by_policy(_slice(plugin, own, driver="gpu.nvidia.com", pool=own), policy)
    assert f"may only write ResourceSlices of driver {driver}, not spec.driver: gpu" in message
    message = _refused_by_policy(_slice(plugin, own, driver=driver, pool=other), policy)
    assert f"of its own pool (spec.pool.name: {own}), not spec.pool.name: {other}" in message
    message = _refused_by_policy(_slice(plugin, other, driver=driver, pool=other), policy)
    assert f"of its own node (spec.nodeName: {own}), not spec.nodeName: {other}" in message
    assert _refusal(_slice(plugin, own, driver=driver, pool=own)) is None
