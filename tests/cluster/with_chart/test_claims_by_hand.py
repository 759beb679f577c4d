"""ResourceClaims written by hand for a ComputeDomain, as the incumbent's docs write them.

- They schedule, form and run as claims from the domain's template do, whichever JSON
  spelling their writer used: kubectl's compact one, or the Python client's spaced one (the API
  server keeps a claim's opaque parameters byte for byte, and the controller's binding answer
  must leave them as they are).
- Bad input in them is named in a Warning Event on the claim as soon as the controller sees
  it, before any node prepares it.
- A claim of another namespace that names a domain's UID gets nothing of that domain: no node,
  no slot, no say in its deletion, and an Event in its own namespace that names nothing of it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from computedomains import waiting
from computedomains.api import constants, placement, resources
from tests.support import domains, kube

pytestmark = pytest.mark.cluster

COMPACT_NODE, SPACED_NODE = "gb200-r1-n04", "gb200-r1-n05"
TEMPLATE_NODES = ["gb200-r1-n06", "gb200-r1-n07"]
"""Where a domain of template claims forms beside, for the time it takes (the figure printed)."""
VICTIM_NODE, STOLEN_NODE = "gb200-r1-n02", "gb200-r1-n03"


def _template_spec(api: client.ApiClient, namespace: str, domain: dict[str, Any]) -> Any:
    name = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    template = client.ResourceV1Api(api).read_namespaced_resource_claim_template(name, namespace)
    return api.sanitize_for_serialization(template.spec.spec)  # type: ignore[no-untyped-call]


def _create_compact(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    """Create a claim as kubectl sends it: compact JSON, which the API server keeps as sent
    in the opaque parameters (the generated client would space it)."""
    data = json.dumps(body, separators=(",", ":")).encode()
    url = api.configuration.host + resources.RESOURCE_CLAIMS.path(namespace=namespace)
    answer = api.rest_client.pool_manager.request(
        "POST", url, body=data, headers={"Content-Type": "application/json"}
    )
    assert answer.status == 201, answer.data


def _warnings(
    api: client.ApiClient, namespace: str, kind: str, name: str, reason: str
) -> list[str]:
    return [e.message for e in kube.events_for(api, namespace, kind, name, reason=reason)]


def _incumbent_spec(domain: dict[str, Any]) -> dict[str, Any]:
    """A channel claim's spec as the incumbent's docs write it: the DeviceClass and the config
    naming the domain's UID, no toleration of its hold and no selector (so no turn: the
    devices of a free node carry binding conditions, which the controller answers)."""
    parameters = {"apiVersion": constants.API_VERSION, "kind": constants.CHANNEL_CONFIG_KIND,
                  "domainID": domain["metadata"]["uid"]}  # fmt: skip
    return {
        "devices": {
            "requests": [
                {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}
            ],
            "config": [
                {
                    "requests": ["channel"],
                    "opaque": {"driver": constants.DRIVER_NAME, "parameters": parameters},
                }
            ],
        }
    }


def test_claims_written_by_hand_in_either_json_spelling_schedule_and_form(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    domain = domains.create_domain(api, namespace)
    spec = _incumbent_spec(domain)
    start = time.monotonic()
    _create_compact(api, namespace, {"metadata": {"name": "compact"}, "spec": spec})
    body = {"metadata": {"name": "spaced"}, "spec": spec}
    client.ResourceV1Api(api).create_namespaced_resource_claim(namespace, body)  # spaced JSON
    pods = [
        domains.create_pod(api, namespace, domain, "compact", node=COMPACT_NODE, claim="compact"),
        domains.create_pod(api, namespace, domain, "spaced", node=SPACED_NODE, claim="spaced"),
    ]
    ready = domains.wait_ready(api, namespace, domain, pods)
    by_hand = time.monotonic() - start
    assert {n["name"] for n in ready["status"]["nodes"]} == {COMPACT_NODE, SPACED_NODE}
    domains.delete_pods(api, namespace, domain["metadata"]["name"])

    # The same with the domain's template, for the figure: claims by hand are no slower.
    templated = domains.create_domain(api, namespace)
    start = time.monotonic()
    pods = domains.workers(api, namespace, templated, TEMPLATE_NODES)
    domains.wait_ready(api, namespace, templated, pods)
    print(
        f"2-node domain Ready: {by_hand:.2f}s with claims by hand, "
        f"{time.monotonic() - start:.2f}s with template claims"
    )
    domains.delete_pods(api, namespace, templated["metadata"]["name"])


def test_an_unknown_field_in_a_claim_written_by_hand_is_named_at_once(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    domain = domains.create_domain(api, namespace)
    spec = _incumbent_spec(domain)
    spec["devices"]["config"][0]["opaque"]["parameters"]["allocatonMode"] = "All"
    start = time.monotonic()
    _create_compact(api, namespace, {"metadata": {"name": "typo"}, "spec": spec})
    messages = waiting.until(
        "a Warning Event on claim typo naming its unknown field",
        lambda: _warnings(api, namespace, "ResourceClaim", "typo", "InvalidConfig"),
        timeout=30,
        interval=0.1,
    )
    print(f"unknown field named {time.monotonic() - start:.2f}s after the claim was made")
    assert "allocatonMode" in messages[0], messages


@pytest.fixture
def tenant(api: client.ApiClient) -> Iterator[str]:
    """A second tenant's namespace."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(api, name)
    yield name
    core.delete_namespace(name)


def _settled(api: client.ApiClient, tenant: str, claim: str) -> bool:
    """The foreign claim waits for no answer: never allocated, refused, or allocated without
    binding conditions (before 1.36), where the plugin refuses it."""
    found = client.ResourceV1Api(api).read_namespaced_resource_claim(claim, tenant)
    parsed = placement.parse_claim(api.sanitize_for_serialization(found))  # type: ignore[no-untyped-call]
    return parsed is None or not parsed.pending


def test_a_claim_naming_another_namespaces_domain_gets_nothing_of_it(
    chart: str, api: client.ApiClient, namespace: str, tenant: str
) -> None:
    victim = domains.create_domain(api, namespace)
    uid, name = victim["metadata"]["uid"], victim["metadata"]["name"]
    pods = domains.workers(api, namespace, victim, [VICTIM_NODE])
    domains.wait_ready(api, namespace, victim, pods)

    # The victim's UID is on its node's label; its template's spec (the toleration of its
    # hold included) is what the incumbent's docs show: the other tenant writes both.
    spec = _template_spec(api, namespace, victim)
    body = {"metadata": {"name": "stolen"}, "spec": spec}
    client.ResourceV1Api(api).create_namespaced_resource_claim(tenant, body)
    domains.create_pod(api, tenant, victim, "thief", node=STOLEN_NODE, claim="stolen")

    def seen() -> bool:
        told = _warnings(api, tenant, "Pod", "thief", "ComputeDomainNotFound")
        listed = domains.get_domain(api, namespace, name)["status"]["nodes"]
        return bool(told) or STOLEN_NODE in {n["name"] for n in listed}

    waiting.until("the thief's pod to be told, or its node to join the victim", seen, timeout=60)
    waiting.until(
        "the thief's claim to wait for no answer", lambda: _settled(api, tenant, "stolen"),
        timeout=60,
    )  # fmt: skip
    current = domains.get_domain(api, namespace, name)
    assert [n["name"] for n in current["status"]["nodes"]] == [VICTIM_NODE]
    for clique in domains.cliques(api, chart, uid):
        assert STOLEN_NODE not in {d["nodeName"] for d in clique.get("daemons") or []}
    labels = client.CoreV1Api(api).read_node(STOLEN_NODE).metadata.labels or {}
    assert labels.get(constants.COMPUTE_DOMAIN_LABEL) != uid

    # The victim goes when its own pods are gone, whatever the thief's claim still asks.
    domains.delete_pods(api, namespace, name)
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        constants.GROUP, constants.STORAGE_VERSION, namespace, constants.COMPUTE_DOMAIN_PLURAL,
        name,
    )  # fmt: skip
    custom = client.CustomObjectsApi(api)
    waiting.until(
        f"ComputeDomain {namespace}/{name} to be deleted",
        lambda: name
        not in {
            d["metadata"]["name"]
            for d in custom.list_namespaced_custom_object(
                constants.GROUP, constants.STORAGE_VERSION, namespace,
                constants.COMPUTE_DOMAIN_PLURAL,
            )["items"]
        },
        timeout=60,
    )  # fmt: skip
    assert client.CoreV1Api(api).read_namespaced_pod("thief", tenant).status.phase == "Pending"

    # Told, in its own namespace, in words that name nothing of the other tenant.
    told = waiting.until(
        "a Warning Event on the thief pod: its domain does not exist in its namespace",
        lambda: _warnings(api, tenant, "Pod", "thief", "ComputeDomainNotFound"),
        timeout=60,
    )
    assert f"does not exist in namespace {tenant}" in told[0], told
    every = [str(e.message) for e in client.CoreV1Api(api).list_namespaced_event(tenant).items]
    assert not [m for m in every if namespace in m or name in m], every
