"""Domains side by side in one cluster: no pod is ever prepared on a node another domain holds.

The scheduler sees the hold (device taints and the holder attribute on the node's channel
devices) and, for a free node, waits for the controller's answer to the devices' binding
conditions, unless only one domain is placing: then free nodes are tainted for that domain
(its turn) and its pods bind without waiting (docs/placement.md). The kubelet plugin's
refusal (``NodeInAnotherComputeDomain``) stays the last defence: on Kubernetes 1.36 these
tests check that it never has to act. The webhook's anti-affinity between domains keeps the
pods it labels apart before any of that; the racing tests claim by hand (no webhook) so that
the race still happens. Before 1.36 (``COMPUTE_DOMAINS_KUBE_VERSION=1.34``,
``make test-fallback``) there are no binding conditions: a pod that loses a same-moment race
for a free node is refused by the plugin and, when a workload controller owns it, deleted by
the controller and created again elsewhere.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains import waiting
from computedomains.api import constants, placement
from tests.support import domains

pytestmark = pytest.mark.cluster

REFUSAL = "NodeInAnotherComputeDomain"


def _node_of(api: client.ApiClient, namespace: str, pod: str) -> str:
    return str(client.CoreV1Api(api).read_namespaced_pod(pod, namespace).spec.node_name or "")


def _refusals(api: client.ApiClient, namespaces: list[str]) -> list[str]:
    """Prepare refusals the plugin recorded: each means a pod was placed on a held node."""
    core = client.CoreV1Api(api)
    return [
        f"{e.involved_object.namespace}/{e.involved_object.name}: {e.message}"
        for ns in namespaces
        for e in core.list_namespaced_event(ns).items
        if e.reason == REFUSAL
    ]


def _binding_conditions(api: client.ApiClient) -> bool:
    """Whether the API server has DRA binding conditions (on by default from 1.36)."""
    version = client.VersionApi(api).get_code()
    return (int(version.major), int(version.minor.rstrip("+"))) >= (1, 36)


def _holder_of(api: client.ApiClient, node: str) -> str:
    labels = client.CoreV1Api(api).read_node(node).metadata.labels or {}
    return str(labels.get(constants.COMPUTE_DOMAIN_LABEL, ""))


def _wait_held(api: client.ApiClient, holders: dict[str, str]) -> None:
    """Wait for each node's label copy to name its domain's UID (written after the status)."""
    waiting.until(
        f"the domain label copies {holders}",
        lambda: {node: _holder_of(api, node) for node in holders} == holders,
        timeout=30,
    )


def _namespaces(api: client.ApiClient, count: int) -> list[str]:
    core = client.CoreV1Api(api)
    names = [f"tenant-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    for name in names:
        core.create_namespace({"metadata": {"name": name}})
    return names


def _running_node(api: client.ApiClient, namespace: str) -> str:
    """The node of the one Running pod in ``namespace``."""
    (node,) = [
        p.spec.node_name
        for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items
        if p.status.phase == "Running"
    ]
    return str(node)


def _cleanup(api: client.ApiClient, namespaces: list[str]) -> None:
    core = client.CoreV1Api(api)
    for ns in namespaces:
        client.AppsV1Api(api).delete_collection_namespaced_deployment(ns)
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    waiting.until(
        "the tenants' pods to be gone",
        lambda: not any(core.list_namespaced_pod(ns).items for ns in namespaces),
        timeout=120,
    )
    for ns in namespaces:
        core.delete_namespace(ns)


def test_ten_domains_created_at_once_all_start_beside_a_running_one(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    first = domains.create_domain(api, namespace)
    nodes = ["gb200-r0-n16", "gb200-r0-n17"]
    pods = domains.workers(api, namespace, first, nodes, per_node=2)
    domains.wait_ready(api, namespace, first, pods)
    tenants = _namespaces(api, 10)
    try:
        created = [domains.create_domain(api, ns) for ns in tenants]
        for ns, domain in zip(tenants, created, strict=True):
            domains.create_deployment(api, ns, domain)  # an ordinary manifest: no node selector
        for ns, domain in zip(tenants, created, strict=True):
            domains.wait_ready(api, ns, domain, ["one replica"])
        placed = {ns: _running_node(api, ns) for ns in tenants}
        assert not set(placed.values()) & set(nodes), placed
        assert len(set(placed.values())) == len(tenants), f"two domains share a node: {placed}"
        held = {placed[ns]: d["metadata"]["uid"] for ns, d in zip(tenants, created, strict=True)}
        _wait_held(api, held | dict.fromkeys(nodes, first["metadata"]["uid"]))
        if _binding_conditions(api):
            assert _refusals(api, [namespace, *tenants]) == []
    finally:
        _cleanup(api, tenants)
        domains.delete_pods(api, namespace, first["metadata"]["name"])


def _preferring(node: str, fallback: str) -> dict[str, Any]:
    """Allowed on ``node`` and ``fallback``, ``node`` preferred: both domains aim at it."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": [node, fallback],
                            }
                        ]
                    }
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    },
                }
            ],
        }
    }


def test_two_domains_racing_for_one_free_node_the_loser_goes_elsewhere(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    # Claims made by hand: their pods get no anti-affinity from the webhook, so they do race
    # for the node, and the binding conditions (the plugin's refusal and the controller's
    # unstranding before 1.36) must settle it.
    target, fallback = "gb200-r1-n15", "gb200-r1-n16"
    tenants = _namespaces(api, 2)
    try:
        created = [domains.create_domain(api, ns) for ns in tenants]
        for ns, domain in zip(tenants, created, strict=True):
            claim = domains.claim_by_hand(api, ns, domain, "channel")
            domains.create_deployment(
                api, ns, domain, affinity=_preferring(target, fallback), claim=claim
            )
        for ns, domain in zip(tenants, created, strict=True):
            domains.wait_ready(api, ns, domain, ["one replica"])
        placed = sorted(_running_node(api, ns) for ns in tenants)
        assert placed == sorted([target, fallback])
        if _binding_conditions(api):
            assert _refusals(api, tenants) == []
    finally:
        _cleanup(api, tenants)


def test_a_domain_aimed_only_at_a_held_node_waits_with_a_reason_then_runs(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    node = "gb200-r1-n17"
    tenants = _namespaces(api, 2)
    try:
        holder, waiter = (domains.create_domain(api, ns) for ns in tenants)
        domains.create_pod(api, tenants[0], holder, "worker", node=node)
        domains.wait_ready(api, tenants[0], holder, ["worker"])
        # By a claim made by hand, so no anti-affinity keeps it off the node: the held devices
        # must (the hold reaching the scheduler is what this checks).
        claim = domains.claim_by_hand(api, tenants[1], waiter, "channel")
        domains.create_pod(api, tenants[1], waiter, "worker", node=node, claim=claim)
        core = client.CoreV1Api(api)

        def reason() -> str | None:
            found = [
                e.message
                for e in core.list_namespaced_event(tenants[1]).items
                if e.involved_object.name == "worker" and e.reason == "FailedScheduling"
            ]
            return found[0] if found else None

        message = waiting.until("the waiting pod's scheduling failure", reason, timeout=60)
        assert "cannot allocate all claims" in message, message
        assert _node_of(api, tenants[1], "worker") == ""  # never bound, never prepared
        core.delete_namespaced_pod("worker", tenants[0], grace_period_seconds=0)
        domains.wait_ready(api, tenants[1], waiter, ["worker"])
        _wait_held(api, {node: waiter["metadata"]["uid"]})
        assert _refusals(api, tenants) == []
    finally:
        _cleanup(api, tenants)


def _claims_of(api: client.ApiClient, namespace: str) -> list[Any]:
    return list(client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items)


def _asked(claim: Any) -> bool:
    """The claim's channel devices were allocated with binding conditions."""
    results = claim.status.allocation.devices.results
    return any(r.binding_conditions for r in results if r.driver == constants.DRIVER_NAME)


def _turn(api: client.ApiClient, driver_ns: str) -> str:
    found = client.CoreV1Api(api).read_namespaced_config_map(placement.TURN_CONFIGMAP, driver_ns)
    return placement.turn_of(found.to_dict(), now=datetime.datetime.now(datetime.UTC))


def _published_for_turn(api: client.ApiClient, nodes: list[str], uid: str) -> bool:
    """Every channel device of ``nodes`` is tainted for ``uid``'s turn, without binding
    conditions (the plugins follow the turn's ConfigMap within moments, not at once)."""
    slices = [
        s
        for s in client.ResourceV1Api(api).list_resource_slice().items
        if s.spec.driver == constants.DRIVER_NAME and s.spec.node_name in nodes and s.spec.devices
    ]
    channels = [d for s in slices for d in s.spec.devices if d.name.startswith("channel-")]
    return {s.spec.node_name for s in slices} == set(nodes) and all(
        not d.binding_conditions and any(t.value == uid for t in d.taints or []) for d in channels
    )


def test_a_domain_placing_alone_binds_at_once_a_second_one_brings_the_conditions_back(
    chart: str, api: client.ApiClient
) -> None:
    if not _binding_conditions(api):
        pytest.skip("device taints and binding conditions need Kubernetes 1.36")
    tenants = _namespaces(api, 2)
    try:
        alone = domains.create_domain(api, tenants[0])
        uid = alone["metadata"]["uid"]
        # A pod of it that cannot be placed (no such node): its domain keeps placing, so the
        # turn comes to it once no other domain (an earlier test's) has placed for a while.
        domains.create_pod(api, tenants[0], alone, "stuck", node="no-such-node")
        waiting.until("the turn to go to the one domain placing",
                      lambda: _turn(api, chart) == uid, timeout=60)  # fmt: skip
        nodes = ["gb200-r1-n10", "gb200-r1-n11"]
        waiting.until(f"the plugins of {', '.join(nodes)} to publish the turn",
                      lambda: _published_for_turn(api, nodes, uid), timeout=30)  # fmt: skip
        pods = [domains.create_pod(api, tenants[0], alone, f"w{i}", node=node)
                for i, node in enumerate(nodes)]  # fmt: skip
        domains.wait_ready(api, tenants[0], alone, pods)
        claims = [c for c in _claims_of(api, tenants[0]) if c.status.allocation]
        assert len(claims) == 2 and not any(_asked(c) for c in claims), claims
        # Its pods never waited in PreBind.
        events = client.CoreV1Api(api).list_namespaced_event(tenants[0]).items
        assert [e.involved_object.name for e in events
                if e.reason == "BindingConditionsPending"] == []  # fmt: skip

        # A second domain while the first still places: nobody's turn, binding conditions.
        second = domains.create_domain(api, tenants[1])
        waiting.until("the turn to end while two domains place",
                      lambda: _turn(api, chart) == "", timeout=30)  # fmt: skip
        domains.create_pod(api, tenants[1], second, "w0", node="gb200-r1-n12")
        domains.wait_ready(api, tenants[1], second, ["w0"])
        (claim,) = _claims_of(api, tenants[1])
        assert _asked(claim), claim
        assert _refusals(api, tenants) == []
    finally:
        _cleanup(api, tenants)


def test_the_domain_label_on_pods_is_the_webhooks_alone(
    chart: str, api: client.ApiClient, namespace: str
) -> None:
    # Every domain's pods keep off the nodes of pods with another domain's label: a forged one
    # would keep ComputeDomains off any node.
    core = client.CoreV1Api(api)
    key = "computedomains.io/domain"
    bare = {"metadata": {"name": "forged", "labels": {key: "someone-else"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.37"}]}}  # fmt: skip
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, bare)
    assert refused.value.status in (403, 422), refused.value
    assert "set by the compute-domains webhook alone" in str(refused.value.body)
    domain = domains.create_domain(api, namespace)
    domains.create_pod(api, namespace, domain, "labelled")
    pod = core.read_namespaced_pod("labelled", namespace)
    assert pod.metadata.labels[key] == domain["metadata"]["uid"]
    with pytest.raises(ApiException) as changed:
        core.patch_namespaced_pod("labelled", namespace, {"metadata": {"labels": {key: "x"}}})
    assert "set by the compute-domains webhook alone" in str(changed.value.body)
    core.patch_namespaced_pod("labelled", namespace, {"metadata": {"labels": {"team": "a"}}})
    core.delete_namespaced_pod("labelled", namespace, grace_period_seconds=0)
