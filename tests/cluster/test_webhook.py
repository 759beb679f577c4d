"""``computedomains webhook`` against a real API server: TLS bootstrap, caBundle, conversion,
validation, placement, and what happens while it is down.

The webhook runs as a local process with admin credentials; the CRDs and the webhook
configurations are the chart's, called by URL (tests/support/webhook.py). The tests share
one webhook and run in order: the later ones stop and restart it.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import ports
from computedomains import waiting
from computedomains.api import constants
from tests.support import kube
from tests.support import webhook as wh

pytestmark = pytest.mark.cluster

G, V1, V2 = constants.GROUP, constants.VERSION, constants.VERSION_V1BETA2
PLURAL = constants.COMPUTE_DOMAIN_PLURAL
NO_INJECTION = (
    "--crd-name=",
    "--validating-webhook-configuration=",
    "--mutating-webhook-configuration=",
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, wh.WebhookProcess]]:
    """A one-node cluster with the chart's CRDs and webhook configurations, and the webhook."""
    with wh.one_node_cluster(
        name=f"webhook-{uuid.uuid4().hex[:6]}",
        helm_home=tmp_path_factory.mktemp("helm"),
        log_dir=tmp_path_factory.mktemp("logs"),
    ) as env:
        yield env


@pytest.fixture
def namespace(env: tuple[Any, wh.WebhookProcess]) -> Iterator[str]:
    api, _ = env
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(api, name)
    yield name
    client.CoreV1Api(api).delete_namespace(name)


def _custom(api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _domain(name: str, version: str, **spec: Any) -> dict[str, Any]:
    channel = {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": "Single"}
    return {
        "apiVersion": f"{G}/{version}", "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name}, "spec": {"channel": channel, **spec},
    }  # fmt: skip


def _create(api: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    version = body["apiVersion"].split("/")[1]
    created = _custom(api).create_namespaced_custom_object(G, version, namespace, PLURAL, body)
    return cast(dict[str, Any], created)


def _claiming_pod(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that claims from the ResourceClaimTemplate ``<name>-channel``."""
    container = {"name": "c", "image": "i", "resources": {"claims": [{"name": "ch"}]}}
    claim = {"name": "ch", "resourceClaimTemplateName": f"{name}-channel"}
    return {
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {"containers": [container], "resourceClaims": [claim]},
    }


def _read(api: Any, namespace: str, name: str, version: str) -> dict[str, Any]:
    obj = _custom(api).get_namespaced_custom_object(G, version, namespace, PLURAL, name)
    return cast(dict[str, Any], obj)


def test_the_secret_is_created_and_its_ca_injected_everywhere(
    env: tuple[Any, wh.WebhookProcess],
) -> None:
    api, process = env
    data = wh.secret_data(api, process.secret)
    assert data is not None and set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    want = data["ca.crt"]
    waiting.until(
        "the caBundle in the CRD and both webhooks",
        lambda: set(wh.ca_bundles(api).values()) == {want}, timeout=30,
    )  # fmt: skip
    served = process.served_certificate()
    assert base64.b64decode(data["tls.crt"]).decode().count("BEGIN CERTIFICATE") == 1
    assert _pem_to_der(base64.b64decode(data["tls.crt"])) == served


def _pem_to_der(pem: bytes) -> bytes:
    body = b"".join(line for line in pem.splitlines() if line and not line.startswith(b"-----"))
    return base64.b64decode(body)


def test_v1beta1_is_stored_at_v1beta2_and_reads_back_at_both(
    env: tuple[Any, wh.WebhookProcess], namespace: str
) -> None:
    api, process = env
    _create(api, namespace, _domain("old", V1, numNodes=4))
    at_v2 = _read(api, namespace, "old", V2)
    assert at_v2["apiVersion"] == f"{G}/{V2}" and "numNodes" not in at_v2["spec"]
    assert at_v2["metadata"]["annotations"][constants.NUM_NODES_ANNOTATION] == "4"
    at_v1 = _read(api, namespace, "old", V1)
    assert at_v1["spec"]["numNodes"] == 4
    assert constants.NUM_NODES_ANNOTATION not in (at_v1["metadata"].get("annotations") or {})
    assert process.sample("computedomains_webhook_requests_total", path="/convert", outcome="ok")


def test_v1beta2_placement_survives_a_round_trip_through_v1beta1(
    env: tuple[Any, wh.WebhookProcess], namespace: str
) -> None:
    api, _ = env
    _create(api, namespace, _domain("new", V2, placement={"clique": "Required"}))
    at_v1 = _read(api, namespace, "new", V1)
    assert "placement" not in at_v1["spec"]
    assert at_v1["metadata"]["annotations"][constants.PLACEMENT_ANNOTATION] == (
        '{"clique":"Required"}'
    )
    # Written back at v1beta1 as a client of the old version would: nothing is lost.
    at_v1["metadata"].setdefault("labels", {})["touched"] = "yes"
    _custom(api).replace_namespaced_custom_object(G, V1, namespace, PLURAL, "new", at_v1)
    at_v2 = _read(api, namespace, "new", V2)
    assert at_v2["spec"]["placement"] == {"clique": "Required"}
    assert at_v2["metadata"]["labels"]["touched"] == "yes"
    assert constants.PLACEMENT_ANNOTATION not in (at_v2["metadata"].get("annotations") or {})


def test_a_second_domain_on_the_same_template_is_refused_naming_the_first(
    env: tuple[Any, wh.WebhookProcess], namespace: str
) -> None:
    api, _ = env
    first = _create(api, namespace, _domain("first", V2))
    _wait_cached(env, first)
    clash = _domain("second", V1)
    clash["spec"]["channel"]["resourceClaimTemplate"]["name"] = "first-channel"
    with pytest.raises(ApiException) as refused:
        _create(api, namespace, clash)
    assert kube.status_of(refused.value) == 403
    assert "already used by ComputeDomain 'first'" in str(refused.value.body)


def _wait_cached(env: tuple[Any, wh.WebhookProcess], obj: dict[str, Any]) -> None:
    """Until the webhook's cache has ``obj``: its watch trails the create by an event."""
    api, _ = env
    # The probe for "cached" is the validation itself: a dry-run clash is refused once seen.
    probe = _domain(f"probe-{uuid.uuid4().hex[:6]}", V2)
    probe["spec"]["channel"]["resourceClaimTemplate"]["name"] = obj["spec"]["channel"][
        "resourceClaimTemplate"
    ]["name"]
    namespace = obj["metadata"]["namespace"]

    def refused() -> bool:
        try:
            _custom(api).create_namespaced_custom_object(G, V2, namespace, PLURAL, probe,
                                                         dry_run="All")  # fmt: skip
        except ApiException as exc:
            return kube.status_of(exc) == 403
        return False

    waiting.until(f"the webhook to cache {obj['metadata']['name']}", refused, timeout=30)


def test_pods_of_a_required_domain_get_the_label_the_clique_affinity_and_the_spread(
    env: tuple[Any, wh.WebhookProcess], namespace: str
) -> None:
    api, _ = env
    domain = _create(api, namespace, _domain("placed", V2, placement={"clique": "Required"}))
    _wait_cached(env, domain)
    pod = client.CoreV1Api(api).create_namespaced_pod(namespace, _claiming_pod("placed"))
    uid = domain["metadata"]["uid"]
    assert pod.metadata.labels == {"computedomains.io/domain": uid}
    terms = pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
    assert terms is not None and len(terms) == 1
    term = terms[0]
    assert term.topology_key == constants.CLIQUE_LABEL
    assert term.label_selector.match_labels == {"computedomains.io/domain": uid}
    # The API server took the anti-affinity as well (--spread-domains is on by default).
    anti = pod.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert anti is not None and len(anti) == 1
    apart = anti[0]
    assert apart.topology_key == "kubernetes.io/hostname"
    # An empty namespace selector: other tenants' domains are kept apart too.
    assert apart.namespace_selector is not None and not apart.namespace_selector.match_labels
    assert not apart.namespace_selector.match_expressions
    others = apart.label_selector.match_expressions
    assert [(e.key, e.operator, e.values) for e in others] == [
        ("computedomains.io/domain", "Exists", None),
        ("computedomains.io/domain", "NotIn", [uid]),
    ]


def test_a_removed_ca_bundle_comes_back(env: tuple[Any, wh.WebhookProcess]) -> None:
    """As after a re-apply by Helm or Argo CD that replaced the whole conversion block."""
    api, _ = env
    crd = client.ApiextensionsV1Api(api)
    name = "computedomains.resource.nvidia.com"
    body = crd.read_custom_resource_definition(name)
    want = body.spec.conversion.webhook.client_config.ca_bundle
    body.spec.conversion.webhook.client_config.ca_bundle = None
    crd.replace_custom_resource_definition(name, body)
    waiting.until(
        "the caBundle back in the CRD",
        lambda: wh.ca_bundles(api)["crd"] == want, timeout=30,
    )  # fmt: skip


def test_webhook_down_storage_reads_work_conversions_fail_fast_nothing_is_lost(
    env: tuple[Any, wh.WebhookProcess], namespace: str
) -> None:
    api, process = env
    _create(api, namespace, _domain("kept", V1, numNodes=2))
    _create(api, namespace, _domain("kept2", V2, placement={"clique": "Preferred"}))
    process.stop()
    listed = _custom(api).list_namespaced_custom_object(G, V2, namespace, PLURAL)["items"]
    assert sorted(o["metadata"]["name"] for o in listed) == ["kept", "kept2"]
    assert _read(api, namespace, "kept2", V2)["spec"]["placement"] == {"clique": "Preferred"}
    started = time.monotonic()
    with pytest.raises(ApiException) as failed:
        _read(api, namespace, "kept", V1)
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"a v1beta1 read took {elapsed:.1f}s with the webhook down"
    assert "conversion webhook" in str(failed.value.body)
    assert "connection refused" in str(failed.value.body)
    # A pod claiming from a template is admitted without its placement; one that arrives
    # with the domain label, which only the webhook may vouch for, is refused.
    core = client.CoreV1Api(api)
    assert core.create_namespaced_pod(namespace, _claiming_pod("plain")).metadata.labels is None
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(
            namespace, _claiming_pod("forged", labels={"computedomains.io/domain": "someone"})
        )
    assert "labelled.placement.pods.computedomains.io" in str(refused.value.body)
    process.start()
    assert _read(api, namespace, "kept", V1)["spec"]["numNodes"] == 2
    assert _read(api, namespace, "kept2", V2)["spec"]["placement"] == {"clique": "Preferred"}


def test_a_restart_keeps_the_secret_and_serves_the_same_certificate(
    env: tuple[Any, wh.WebhookProcess],
) -> None:
    api, process = env
    before = wh.secret_data(api, process.secret)
    served = process.served_certificate()
    process.kill()
    process.start()
    assert wh.secret_data(api, process.secret) == before
    assert process.served_certificate() == served


def test_two_replicas_starting_together_agree_on_one_secret(
    env: tuple[Any, wh.WebhookProcess], tmp_path_factory: pytest.TempPathFactory
) -> None:
    api, first = env
    secret = f"race-{uuid.uuid4().hex[:6]}"
    logs = tmp_path_factory.mktemp("race")
    replicas = [
        # No injection: the CRD and the webhooks keep the first webhook's CA meanwhile.
        wh.WebhookProcess(kubeconfig=first.kubeconfig, log_dir=logs, name=f"replica-{i}",
                          port=ports.free_port(), secret=secret, args=NO_INJECTION)
        for i in range(2)
    ]  # fmt: skip
    try:
        for replica in replicas:
            replica.start(wait=False)
        for replica in replicas:
            replica.wait_ready()
        data = wh.secret_data(api, secret)
        assert data is not None
        stored = _pem_to_der(base64.b64decode(data["tls.crt"]))
        assert [r.served_certificate() for r in replicas] == [stored, stored]
    finally:
        for replica in replicas:
            replica.stop()
        client.CoreV1Api(api).delete_namespaced_secret(secret, wh.NAMESPACE)
