"""The CRDs, rendered from the crds subchart, on a real API server: defaults, validation,
immutability, the status subresource, printer columns, short names, and both versions with no
conversion webhook running (what "webhook down" means: docs/control-side.md)."""

from __future__ import annotations

import functools
import json
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import tools
from computedomains import waiting
from computedomains.api import constants
from computedomains.api.models import (
    ComputeDomainClique,
    ComputeDomainCliqueV1Beta2,
    ComputeDomainV1Beta2,
    Status,
)
from computedomains.api.schema import DNS1123_SUBDOMAIN, ValidationError
from tests.support import clusters, helm, kube

pytestmark = pytest.mark.cluster

CHART = pathlib.Path(__file__).parents[2] / "chart" / "charts" / "crds"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CD_PLURAL = constants.COMPUTE_DOMAIN_PLURAL
G, V = constants.GROUP, constants.STORAGE_VERSION
V1 = constants.VERSION


@pytest.fixture(scope="module")
def helm3(cluster: clusters.TestCluster, tmp_path_factory: pytest.TempPathFactory) -> helm.Helm:
    return helm.Helm(
        binary=tools.ToolBox.from_env().path("helm3"),
        kubeconfig=cluster.kubeconfig,
        home=tmp_path_factory.mktemp("helm"),
    )


def render(h: helm.Helm, *args: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(h.run("template", "crds", str(CHART), *args)) if d]


@pytest.fixture(scope="module")
def crds(cluster: clusters.TestCluster, helm3: helm.Helm) -> Iterator[list[dict[str, Any]]]:
    """The rendered CRDs, installed and Established; removed afterwards if this module made them.

    CRDs already there (another module installed the full chart) are used as they are and
    left in place.
    """
    docs = render(helm3)
    ext = client.ApiextensionsV1Api(cluster.api())
    created: list[str] = []
    for doc in docs:
        try:
            ext.create_custom_resource_definition(doc)
            created.append(doc["metadata"]["name"])
        except ApiException as exc:
            if kube.status_of(exc) != 409:
                raise
    for doc in docs:
        name = doc["metadata"]["name"]
        waiting.until(
            f"CRD {name} Established",
            functools.partial(kube.crd_established, ext, name),
            timeout=30,
        )
    api = cluster.api()
    waiting.until(
        f"{G}/{V} served with both resources",
        lambda: len(get_json(api, f"/apis/{G}/{V}")["resources"]) >= 2,
        timeout=30,
        retry_on=(ApiException,),
    )
    yield docs
    for name in created:
        ext.delete_custom_resource_definition(name)
    for name in created:
        waiting.until(
            f"CRD {name} deleted", functools.partial(kube.crd_gone, ext, name), timeout=60
        )


def get_json(api: client.ApiClient, path: str, accept: str = "application/json") -> Any:
    """GET ``path`` with a chosen Accept header (the Table request needs its own)."""
    serialized = api.param_serialize(
        "GET", path, header_params={"Accept": accept}, auth_settings=["BearerToken"]
    )
    response = api.call_api(*serialized)
    data = response.read()  # type: ignore[no-untyped-call]
    if response.status != 200:
        raise ApiException(status=response.status, reason=response.reason, http_resp=response)
    return json.loads(data)


def as_dict(value: object) -> dict[str, Any]:
    """A custom-object call's result, typed: the client declares them as plain ``object``."""
    assert isinstance(value, dict)
    return value


def manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A v1beta2 ComputeDomain (no webhook runs here: v1beta1 writes would need one)."""
    return {
        "apiVersion": constants.API_VERSION_V1BETA2,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}, **spec},
    }


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    return as_dict(objects.create_namespaced_custom_object(G, V, namespace, CD_PLURAL, body))


def rejection(call: Callable[[], Any]) -> str:
    """The API server's message for a call it must reject as invalid (HTTP 422)."""
    with pytest.raises(ApiException) as info:
        call()
    assert kube.status_of(info.value) == 422, info.value.body
    return str(json.loads(info.value.body)["message"])


# -- the chart ----------------------------------------------------------------------------


def test_chart_renders_labels_and_keep_annotations(helm3: helm.Helm) -> None:
    docs = render(helm3)
    assert sorted(d["metadata"]["name"] for d in docs) == [
        "computedomaincliques.resource.nvidia.com",
        "computedomains.resource.nvidia.com",
    ]
    for doc in docs:
        labels, annotations = doc["metadata"]["labels"], doc["metadata"]["annotations"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "crds"
        assert labels["app.kubernetes.io/part-of"] == "compute-domains"
        assert annotations == {
            "argocd.argoproj.io/sync-wave": "-2",
            "helm.sh/resource-policy": "keep",
            "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
        }
        stored = [v["name"] for v in doc["spec"]["versions"] if v["storage"]]
        assert stored == [constants.STORAGE_VERSION]
    for doc in render(helm3, "--set", "keep=false"):
        assert doc["metadata"]["annotations"] == {"argocd.argoproj.io/sync-wave": "-2"}


def test_chart_renders_the_conversion_and_the_storage_version(helm3: helm.Helm) -> None:
    docs = {d["spec"]["names"]["kind"]: d for d in render(helm3, "--namespace", "gpu")}
    assert docs[constants.CLIQUE_KIND]["spec"]["conversion"] == {"strategy": "None"}
    webhook = docs[constants.COMPUTE_DOMAIN_KIND]["spec"]["conversion"]["webhook"]
    assert webhook == {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "crds-cd-webhook", "namespace": "gpu",
                                     "path": "/convert", "port": 443}},
    }  # fmt: skip
    for doc in render(helm3, "--set", "storageVersion=v1beta1"):
        assert [v["name"] for v in doc["spec"]["versions"] if v["storage"]] == [V1]


def test_chart_values_schema_is_strict(helm3: helm.Helm) -> None:
    with pytest.raises(AssertionError, match="additional properties 'keeep' not allowed"):
        render(helm3, "--set", "keeep=false")
    with pytest.raises(AssertionError, match="keep"):
        render(helm3, "--set-string", "keep=no")
    with pytest.raises(AssertionError, match="storageVersion"):
        render(helm3, "--set", "storageVersion=v1")


# -- the API server -----------------------------------------------------------------------


def test_valid_compute_domain_gets_the_defaults(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    created = create(api, namespace, manifest("plain"))
    assert created["spec"] == {
        "channel": {"resourceClaimTemplate": {"name": "plain-channel"}, "allocationMode": "Single"},
    }
    assert "status" not in created  # the status subresource drops status on create
    parsed = ComputeDomainV1Beta2.from_dict(created, strict=True)
    # The model's defaults are the server's: the minimal manifest parses to the same thing.
    assert parsed.spec == ComputeDomainV1Beta2.from_dict(manifest("plain")).spec
    placed = create(api, namespace, manifest("placed", placement={}))
    assert placed["spec"]["placement"] == {"clique": "None"}
    assert (
        ComputeDomainV1Beta2.from_dict(placed).spec
        == ComputeDomainV1Beta2.from_dict(manifest("placed", placement={})).spec
    )


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            lambda s: s["channel"].update(allocationMode="Many"),
            "spec.channel.allocationMode",
            "Unsupported value",
        ),
        (lambda s: s.pop("channel"), "spec.channel", "Required value"),
        (
            lambda s: s.update(placement={"clique": "Always"}),
            "spec.placement.clique",
            "Unsupported value",
        ),
        (
            lambda s: s["channel"]["resourceClaimTemplate"].pop("name"),
            "spec.channel.resourceClaimTemplate.name",
            "Required value",
        ),
        (lambda s: s.update(numNodes=3), "spec.numNodes", "a v1beta1 field"),
    ],
    ids=["allocationMode", "no-channel", "placement", "no-template-name", "numNodes"],
)
def test_invalid_compute_domains_are_rejected_naming_the_field(
    crds: list[dict[str, Any]],
    api: client.ApiClient,
    namespace: str,
    change: Callable[[dict[str, Any]], Any],
    field: str,
    reason: str,
) -> None:
    body = manifest("bad")
    change(body["spec"])
    message = rejection(lambda: create(api, namespace, body))
    assert f"{field}: " in message and reason in message, message
    # The model refuses the same manifest, naming the same field.
    with pytest.raises(ValidationError) as info:
        ComputeDomainV1Beta2.from_dict(body)
    assert info.value.field == field


TEMPLATE_NAME = "spec.channel.resourceClaimTemplate.name"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        pytest.param("", "at least 1 chars long", id="empty"),
        pytest.param("a" * 254, "Too long: may not be more than 253 bytes", id="254-chars"),
        ("Channel", DNS1123_SUBDOMAIN.message),
        ("cd_channel", DNS1123_SUBDOMAIN.message),
        ("-channel", DNS1123_SUBDOMAIN.message),
        ("channel.", DNS1123_SUBDOMAIN.message),
        ("a..b", DNS1123_SUBDOMAIN.message),
        ("team/channel", DNS1123_SUBDOMAIN.message),
    ],
)
def test_invalid_template_names_are_rejected_naming_the_field(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str, name: str, reason: str
) -> None:
    """The controller could never create such a template: the CRD refuses the domain instead."""
    body = manifest("badname")
    body["spec"]["channel"]["resourceClaimTemplate"]["name"] = name
    message = rejection(lambda: create(api, namespace, body))
    assert f"{TEMPLATE_NAME}: " in message and reason in message, message
    with pytest.raises(ValidationError) as info:
        ComputeDomainV1Beta2.from_dict(body)
    assert info.value.field == TEMPLATE_NAME


@pytest.mark.parametrize(
    "name", ["a", "0", "nccl.allreduce-1", pytest.param("a" * 253, id="253-chars")]
)
def test_valid_template_names_are_accepted(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str, name: str
) -> None:
    body = manifest("goodname")
    body["spec"]["channel"]["resourceClaimTemplate"]["name"] = name
    created = create(api, namespace, body)
    assert created["spec"]["channel"]["resourceClaimTemplate"]["name"] == name
    # A real template of that name is accepted too: the CRD refuses no name Kubernetes allows.
    template = {"metadata": {"name": name}, "spec": {"spec": {}}}
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace, template, dry_run="All"
    )


def test_spec_is_immutable_but_metadata_is_not(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    objects = client.CustomObjectsApi(api)
    created = create(api, namespace, manifest("fixed"))
    changed = json.loads(json.dumps(created))
    changed["spec"]["placement"] = {"clique": "Required"}
    message = rejection(
        lambda: objects.replace_namespaced_custom_object(
            G, V, namespace, CD_PLURAL, "fixed", changed
        )
    )
    assert "A computeDomain.spec is immutable" in message

    created["metadata"]["labels"] = {"team": "a"}
    updated = objects.replace_namespaced_custom_object(G, V, namespace, CD_PLURAL, "fixed", created)
    assert updated["metadata"]["labels"] == {"team": "a"}

    # `kubectl patch ... -p '{"spec":{"numNodes":3}}'` speaks v1beta2, which has no numNodes:
    # refused naming the field, not pruned into "patched (no change)".
    message = rejection(
        lambda: objects.patch_namespaced_custom_object(
            G, V, namespace, CD_PLURAL, "fixed", {"spec": {"numNodes": 3}}
        )
    )
    assert "spec.numNodes: " in message and "numNodes is a v1beta1 field" in message, message


def write_status(
    api: client.ApiClient, namespace: str, name: str, status: dict[str, Any]
) -> dict[str, Any]:
    objects = client.CustomObjectsApi(api)
    current = as_dict(objects.get_namespaced_custom_object(G, V, namespace, CD_PLURAL, name))
    current["status"] = status
    return as_dict(
        objects.replace_namespaced_custom_object_status(G, V, namespace, CD_PLURAL, name, current)
    )


def test_status_subresource_defaults_and_list_map_keys(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    objects = client.CustomObjectsApi(api)
    created = create(api, namespace, manifest("st"))
    # Through the main resource, status is ignored.
    created["status"] = {"status": "Ready"}
    after = as_dict(
        objects.replace_namespaced_custom_object(G, V, namespace, CD_PLURAL, "st", created)
    )
    assert "status" not in after

    node = {"name": "n0", "ipAddress": "10.1.0.1", "cliqueID": "c.1", "index": 0}
    ready = {"type": "Ready", "status": "False", "reason": "NotFormed",
             "lastTransitionTime": "2025-01-01T00:00:00Z"}  # fmt: skip
    summary = {"id": "c.1", "nodes": 1, "readyNodes": 0}
    written = write_status(
        api,
        namespace,
        "st",
        {"nodes": [node], "nodesReady": "0/1", "conditions": [ready], "cliques": [summary]},
    )
    assert written["status"] == {
        "status": "NotReady",
        "nodes": [{**node, "status": "NotReady"}],
        "nodesReady": "0/1",
        "conditions": [{**ready, "message": ""}],
        "cliques": [summary],
    }
    parsed = ComputeDomainV1Beta2.from_dict(written, strict=True)
    assert parsed.status is not None and parsed.status.nodes[0].status is Status.NOT_READY

    message = rejection(lambda: write_status(api, namespace, "st", {"nodes": [node, node]}))
    assert "status.nodes[1]" in message and "Duplicate value" in message
    message = rejection(lambda: write_status(api, namespace, "st", {"status": "Up"}))
    assert "status.status: Unsupported value" in message
    message = rejection(
        lambda: write_status(api, namespace, "st", {"conditions": [ready, {**ready}]})
    )
    assert "status.conditions[1]" in message and "Duplicate value" in message
    message = rejection(lambda: write_status(api, namespace, "st", {"conditions": [
        {k: v for k, v in ready.items() if k != "reason"}]}))  # fmt: skip
    assert "status.conditions[0].reason: Required value" in message


def test_printer_columns_show_status_and_nodes(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    create(api, namespace, manifest("shown", placement={"clique": "Required"}))
    node = {"name": "n0", "ipAddress": "10.1.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}
    ready = {"type": "Ready", "status": "True", "reason": "AllNodesReady", "message": "",
             "lastTransitionTime": "2025-01-01T00:00:00Z"}  # fmt: skip
    write_status(api, namespace, "shown", {"status": "Ready", "nodes": [node], "nodesReady": "1/1",
                                           "conditions": [ready]})  # fmt: skip

    table = get_json(api, f"/apis/{G}/{V}/namespaces/{namespace}/{CD_PLURAL}", accept=TABLE)
    assert table["kind"] == "Table"
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Ready", "Reason", "Nodes", "Placement", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:5] == ["shown", "True", "AllNodesReady", "1/1", "Required"]


def test_short_names_are_in_discovery_and_clash_with_nothing(
    crds: list[dict[str, Any]], api: client.ApiClient
) -> None:
    ours = {r["name"]: r for r in get_json(api, f"/apis/{G}/{V}")["resources"]}
    assert ours[CD_PLURAL]["shortNames"] == ["cd"]
    assert ours[constants.CLIQUE_PLURAL]["shortNames"] == ["cdclique"]
    assert ours[CD_PLURAL]["namespaced"] and ours[constants.CLIQUE_PLURAL]["namespaced"]
    assert f"{CD_PLURAL}/status" in ours
    assert f"{constants.CLIQUE_PLURAL}/status" not in ours

    others: dict[str, str] = {}
    group_versions = ["/api/v1"] + [
        f"/apis/{g['preferredVersion']['groupVersion']}"
        for g in get_json(api, "/apis")["groups"]
        if g["name"] != G
    ]
    for path in group_versions:
        for resource in get_json(api, path)["resources"]:
            for short in resource.get("shortNames", []):
                others[short] = f"{path} {resource['name']}"
    assert {"cd", "cdclique"}.isdisjoint(others), others


def test_clique_defaults_and_list_map_keys(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    """At v1beta1, as the incumbent writes them: one schema, so no webhook is involved."""
    objects = client.CustomObjectsApi(api)
    daemon = {"nodeName": "n0", "ipAddress": "10.1.0.1", "cliqueID": "c.1", "index": 0}
    body = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CLIQUE_KIND,
        "metadata": {"name": "uid.c.1"},
        "daemons": [daemon],
    }
    plural = constants.CLIQUE_PLURAL
    created = objects.create_namespaced_custom_object(G, V1, namespace, plural, body)
    assert created["daemons"] == [{**daemon, "status": "NotReady"}]
    parsed = ComputeDomainClique.from_dict(created, strict=True)
    assert parsed.daemons[0].status is Status.NOT_READY
    stored = objects.get_namespaced_custom_object(G, V, namespace, plural, "uid.c.1")
    assert ComputeDomainCliqueV1Beta2.from_dict(stored, strict=True).daemons == parsed.daemons

    # No status subresource: daemons update the top-level list directly.
    created["daemons"][0]["status"] = "Ready"
    updated = objects.replace_namespaced_custom_object(G, V1, namespace, plural, "uid.c.1", created)
    assert updated["daemons"][0]["status"] == "Ready"

    body["metadata"]["name"] = "uid.c.2"
    body["daemons"] = [daemon, {**daemon, "ipAddress": "10.1.0.2"}]
    message = rejection(
        lambda: objects.create_namespaced_custom_object(G, V1, namespace, plural, body)
    )
    assert "daemons[1]" in message and "Duplicate value" in message


# -- no conversion webhook ----------------------------------------------------------------

CONVERSION_BUDGET = 20.0
"""Below the API server's 30 s webhook call timeout: a request that needs the missing webhook
fails because there is no Service to call, not because a call timed out. (It takes milliseconds,
a list up to 3 s waiting for the v1beta1 watch cache that cannot fill; the bound leaves room for
a loaded machine, the figures are printed.)"""


def timed_failure(call: Callable[[], Any]) -> tuple[ApiException, float]:
    """The error ``call`` fails with, and how long it took to fail."""
    start = time.monotonic()
    with pytest.raises(ApiException) as info:
        call()
    return info.value, time.monotonic() - start


def test_without_the_webhook_storage_version_works_and_v1beta1_fails_fast(
    crds: list[dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    """Webhook down: reads and writes at v1beta2 (every component's) work; a v1beta1 read or
    write fails at once, saying that the conversion webhook failed; nothing is lost."""
    objects = client.CustomObjectsApi(api)
    created = create(api, namespace, manifest("down", placement={"clique": "Preferred"}))
    write_status(api, namespace, "down", {"status": "NotReady", "nodesReady": "0/0"})
    listed = objects.list_namespaced_custom_object(G, V, namespace, CD_PLURAL)["items"]
    assert "down" in {o["metadata"]["name"] for o in listed}

    # The Service the CRD's conversion names (the chart's, or an earlier release's).
    crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(f"{CD_PLURAL}.{G}")
    service = crd.spec.conversion.webhook.client_config.service.name
    timings: dict[str, float] = {}
    calls: dict[str, Callable[[], Any]] = {
        "get": lambda: objects.get_namespaced_custom_object(G, V1, namespace, CD_PLURAL, "down"),
        "list": lambda: objects.list_namespaced_custom_object(G, V1, namespace, CD_PLURAL),
        "create": lambda: objects.create_namespaced_custom_object(G, V1, namespace, CD_PLURAL, {
            "apiVersion": constants.API_VERSION, "kind": constants.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": "old"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "c"}}}}),
    }  # fmt: skip
    for what, call in calls.items():
        seconds = []
        for _ in range(3):
            error, took = timed_failure(call)
            seconds.append(took)
        timings[what] = max(seconds)
        message = str(json.loads(error.body)["message"])
        assert f'service "{service}" not found' in message, (what, message)
        if what == "list" and kube.status_of(error) == 429:
            # A list may be served by the v1beta1 watch cache, which cannot fill without the
            # webhook: it answers "retry later" with the conversion failure as the reason.
            assert message.startswith("storage is (re)initializing"), message
            continue
        assert kube.status_of(error) == 500, (what, error.body)
        # It names the version converted from: v1beta2 on reads, v1beta1 on the write.
        source = "v1beta1" if what == "create" else "v1beta2"
        expected = f"conversion webhook for resource.nvidia.com/{source}, Kind=ComputeDomain failed"
        assert expected in message, (what, message)
    print(f"\nwithout the webhook, v1beta1 requests fail in (s): "
          f"{ {k: round(v, 3) for k, v in timings.items()} }")  # fmt: skip
    assert max(timings.values()) < CONVERSION_BUDGET, timings

    after = as_dict(objects.get_namespaced_custom_object(G, V, namespace, CD_PLURAL, "down"))
    assert after["spec"] == created["spec"]  # nothing lost
    assert after["status"]["nodesReady"] == "0/0"
    names = {o["metadata"]["name"] for o in objects.list_namespaced_custom_object(
        G, V, namespace, CD_PLURAL)["items"]}  # fmt: skip
    assert "old" not in names  # the refused write stored nothing
