"""DRA allocation works end to end in the real scheduler with a hand-written driver's objects."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from tests.support import kube

pytestmark = pytest.mark.cluster


@pytest.fixture
def driver(sim: sim_cluster.SimCluster, api: client.ApiClient) -> Iterator[tuple[str, str]]:
    """A DeviceClass and a one-device ResourceSlice on one node; yields (driver, node)."""
    name = f"t{uuid.uuid4().hex[:6]}.sim.example.com"
    node = sim.nodes[5].name
    resource = client.ResourceV1Api(api)
    resource.create_device_class(
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]},
        }
    )
    resource.create_resource_slice(
        {
            "metadata": {"name": f"{node}-{name}"},
            "spec": {
                "driver": name,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "dev-0", "attributes": {"kind": {"string": "widget"}}}],
            },
        }
    )
    yield name, node
    resource.delete_resource_slice(f"{node}-{name}")
    resource.delete_device_class(name)


def _claim_pod(namespace: str, name: str, template: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.37",
                    "command": ["sleep", "3600"],
                    "resources": {"claims": [{"name": "dev"}]},
                }
            ],
        },
    }


def _template(
    api: client.ApiClient, namespace: str, name: str, device_class: str, selector: str | None
) -> None:
    request: dict[str, object] = {"deviceClassName": device_class}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}}},
        },
    )


def test_claim_from_template_is_allocated_reserved_and_pod_bound(
    driver: tuple[str, str], api: client.ApiClient, namespace: str
) -> None:
    name, node = driver
    _template(api, namespace, "widget", name, f"device.attributes['{name}'].kind == 'widget'")
    client.CoreV1Api(api).create_namespaced_pod(namespace, _claim_pod(namespace, "user", "widget"))

    pod = kube.wait_for_pod(
        api, namespace, "user", "to be bound with its claim", lambda p: p.spec.node_name
    )
    assert pod.spec.node_name == node
    statuses = pod.status.resource_claim_statuses or []
    assert [s.name for s in statuses] == ["dev"]
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(
        statuses[0].resource_claim_name, namespace
    )
    results = claim.status.allocation.devices.results
    assert [(r.driver, r.pool, r.device, r.request) for r in results] == [
        (name, node, "dev-0", "dev")
    ]
    assert [(r.resource, r.name, r.uid) for r in claim.status.reserved_for] == [
        ("pods", "user", pod.metadata.uid)
    ]
    assert claim.metadata.owner_references[0].uid == pod.metadata.uid

    # No plugin serves this driver on the node, so the kubelet cannot prepare the claim: the
    # pod is bound but never starts, and an Event says why.
    def prepare_failed() -> list[client.CoreV1Event]:
        events = client.CoreV1Api(api).list_namespaced_event(namespace).items
        return [
            e
            for e in events
            if e.involved_object.uid == pod.metadata.uid
            and e.reason == "FailedPrepareDynamicResources"
        ]

    events = waiting.until("a FailedPrepareDynamicResources Event", prepare_failed, timeout=60)
    assert f"DRA driver {name} is not registered" in str(events[0].message)
    assert client.CoreV1Api(api).read_namespaced_pod("user", namespace).status.phase == "Pending"


def test_pod_without_a_matching_device_stays_pending_with_a_scheduler_reason(
    driver: tuple[str, str], api: client.ApiClient, namespace: str
) -> None:
    name, _ = driver
    _template(api, namespace, "gadget", name, f"device.attributes['{name}'].kind == 'gadget'")
    client.CoreV1Api(api).create_namespaced_pod(
        namespace, _claim_pod(namespace, "waiting", "gadget")
    )

    def unschedulable(pod: client.V1Pod) -> bool:
        condition = kube.pod_condition(pod, "PodScheduled")
        return bool(
            condition and condition.status == "False" and condition.reason == "Unschedulable"
        )

    pod = kube.wait_for_pod(api, namespace, "waiting", "to be marked Unschedulable", unschedulable)
    assert pod.spec.node_name is None
    assert pod.status.phase == "Pending"
    message = kube.pod_condition(pod, "PodScheduled").message
    assert "cannot allocate all claims" in message, message
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(claim_name, namespace)
    assert claim.status is None or claim.status.allocation is None
