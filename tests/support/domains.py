"""Workloads for the chart-installed tests: ComputeDomains, their pods, cliques, IMEX peers."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import nodefaults
from computedomains import waiting
from computedomains.api import constants
from tests.support import kube


def create_domain(
    api: client.ApiClient,
    namespace: str,
    *,
    version: str = constants.STORAGE_VERSION,
    num_nodes: int = 0,
) -> dict[str, Any]:
    """A ComputeDomain written at ``version`` (v1beta1: as the incumbent's manifests, with
    ``numNodes``); returns it as created, once the controller made its channel template."""
    name = f"cd-{uuid.uuid4().hex[:5]}"
    body = _domain_body(name, version=version, num_nodes=num_nodes)
    created = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            constants.GROUP, version, namespace, constants.COMPUTE_DOMAIN_PLURAL, body
        ),
    )
    resource = client.ResourceV1Api(api)
    waiting.until(
        f"the controller to create {namespace}/{name}-channel",
        lambda: resource.read_namespaced_resource_claim_template(f"{name}-channel", namespace),
        timeout=30,
        retry_on=(ApiException,),
    )
    return created


def _domain_body(name: str, *, version: str, num_nodes: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}}
    if version == constants.VERSION:
        spec["numNodes"] = num_nodes
    else:
        assert num_nodes == 0, "v1beta2 has no numNodes"
    return {
        "apiVersion": f"{constants.GROUP}/{version}",
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


class _NotAdmittedYet(Exception):
    """The API server answered a dry-run create with a 5xx (a webhook not reachable or trusted)."""


def wait_admitted(api: client.ApiClient, namespace: str, *, timeout: float = 60) -> None:
    """Wait until the API server admits a ComputeDomain: a server-side dry run of a create
    passes every admission webhook. What a pipeline checks before it hands an install over:
    a webhook that answers but is not trusted yet (its caBundle not injected) fails it with a
    500. A refusal (4xx) ends the wait at once: the body is valid, so that is a fault."""
    body = _domain_body(f"cd-dry-{uuid.uuid4().hex[:5]}", version=constants.STORAGE_VERSION,
                        num_nodes=0)  # fmt: skip

    def admitted() -> bool:
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                constants.GROUP, constants.STORAGE_VERSION, namespace,
                constants.COMPUTE_DOMAIN_PLURAL, body, dry_run="All",
            )  # fmt: skip
        except ApiException as exc:
            if kube.status_of(exc) < 500:
                raise
            raise _NotAdmittedYet(exc.body) from exc
        return True

    waiting.until(f"a ComputeDomain in {namespace} to be admitted (server-side dry run)",
                  admitted, timeout=timeout, interval=0.5, retry_on=(_NotAdmittedYet,))  # fmt: skip


def get_domain(
    api: client.ApiClient, namespace: str, name: str, *, version: str = constants.STORAGE_VERSION
) -> dict[str, Any]:
    found = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            constants.GROUP, version, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
        ),
    )
    return found


def claim_by_hand(api: client.ApiClient, namespace: str, domain: dict[str, Any], name: str) -> str:
    """A ResourceClaim of ``domain``'s channel made by hand from its template's spec; its name.

    A pod claiming it by name never reaches the webhook (it claims from no template), so it
    gets neither the domain's label nor the anti-affinity between domains: such pods race for
    a free node as claims of any other tool would.
    """
    template_name = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    resource = client.ResourceV1Api(api)
    template = waiting.until(
        f"ResourceClaimTemplate {namespace}/{template_name}",
        lambda: resource.read_namespaced_resource_claim_template(template_name, namespace),
        timeout=60,
        retry_on=(ApiException,),
    )
    spec = api.sanitize_for_serialization(template.spec.spec)  # type: ignore[no-untyped-call]
    body = {"metadata": {"name": name}, "spec": spec}
    resource.create_namespaced_resource_claim(namespace, body)
    return name


def pod_spec(
    domain: dict[str, Any],
    *,
    node: str = "",
    affinity: dict[str, Any] | None = None,
    claim: str = "",
) -> dict[str, Any]:
    """The spec of a pod of ``domain``: on ``node``, or anywhere; claiming from its template, or
    the claim ``claim`` by name (:func:`claim_by_hand`)."""
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "imex", **source}],
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.37",
                "command": ["sleep", "3600"],
                "resources": {"claims": [{"name": "imex"}]},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if affinity:
        spec["affinity"] = affinity
    return spec


def create_pod(
    api: client.ApiClient,
    namespace: str,
    domain: dict[str, Any],
    name: str,
    *,
    node: str = "",
    affinity: dict[str, Any] | None = None,
    claim: str = "",
) -> str:
    """A bare pod of ``domain``, labelled ``domain=<its name>``; returns its name."""
    labels = {"domain": domain["metadata"]["name"]}
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": pod_spec(domain, node=node, affinity=affinity, claim=claim),
        },
    )
    return name


def create_deployment(
    api: client.ApiClient,
    namespace: str,
    domain: dict[str, Any],
    *,
    affinity: dict[str, Any] | None = None,
    claim: str = "",
) -> str:
    """A one-replica Deployment of ``domain``'s pods (an owner that recreates them)."""
    name = str(domain["metadata"]["name"])
    labels = {"domain": name}
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pod_spec(domain, affinity=affinity, claim=claim),
                },
            },
        },
    )
    return name


def workers(
    api: client.ApiClient,
    namespace: str,
    domain: dict[str, Any],
    nodes: list[str],
    per_node: int = 1,
) -> list[str]:
    """``per_node`` pods of ``domain`` on each of ``nodes``."""
    return [
        create_pod(
            api, namespace, domain, f"{domain['metadata']['name']}-{node[-6:]}-{i}", node=node
        )
        for node in nodes
        for i in range(per_node)
    ]


def wait_ready(
    api: client.ApiClient,
    namespace: str,
    domain: dict[str, Any],
    pods: list[str],
    *,
    version: str = constants.STORAGE_VERSION,
) -> dict[str, Any]:
    name = domain["metadata"]["name"]
    core = client.CoreV1Api(api)

    def ready() -> dict[str, Any] | None:
        running = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector=f"domain={name}").items
            if p.status.phase == "Running"
        ]
        current = get_domain(api, namespace, name, version=version)
        status = current.get("status") or {}
        return current if len(running) == len(pods) and status.get("status") == "Ready" else None

    return waiting.until(
        f"{len(pods)} pods Running and ComputeDomain {name} Ready",
        ready,
        timeout=180,
        interval=1,
        retry_on=(ApiException,),  # a webhook replica going away fails one read, not the wait
    )


def cliques(
    api: client.ApiClient,
    driver_namespace: str,
    uid: str,
    *,
    version: str = constants.STORAGE_VERSION,
) -> list[dict[str, Any]]:
    listing = client.CustomObjectsApi(api).list_namespaced_custom_object(
        constants.GROUP,
        version,
        driver_namespace,
        constants.CLIQUE_PLURAL,
        label_selector=f"{constants.COMPUTE_DOMAIN_LABEL}={uid}",
    )
    return list(listing["items"])


def imex_nodes(sim: sim_cluster.SimCluster, node: str) -> dict[str, Any]:
    """What the node's nvidia-imex-ctl says about its peers (``-N -j``)."""
    imex_dir = sim.host_trees[node].root / "var/run/compute-domains/imex"
    ctl = sim.host_trees[node].root / "usr/bin/nvidia-imex-ctl"
    done = subprocess.run(
        [str(ctl), "-c", str(imex_dir / "imexd.cfg"), "-N", "-j"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def imex_pid(sim: sim_cluster.SimCluster, node: str) -> int | None:
    """PID of the (fake) IMEX daemon running on ``node``, if one runs."""
    return nodefaults.imex_pid(sim.host_trees[node])


def delete_pods(api: client.ApiClient, namespace: str, domain: str) -> None:
    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(namespace, label_selector=f"domain={domain}")
    waiting.until(
        f"the pods of {domain} to be gone",
        lambda: not core.list_namespaced_pod(namespace, label_selector=f"domain={domain}").items,
        timeout=120,
    )
