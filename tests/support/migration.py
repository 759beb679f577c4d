"""Migration tests' helpers: two-version copies of our CRDs in a test group, objects stored at
the old version, the migrate hook as a local process, and what etcd really stores.

The CRDs are our own (``computedomains.api.crds``) moved to :data:`GROUP`, with two versions of
the same schema and conversion strategy None: a storage-version move needs no webhook, and the
test never touches the CRDs other tests install.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import copy
import functools
import json
import os
import pathlib
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants
from computedomains.api import crds as api_crds
from tests.support import kube

GROUP = "migration-test.computedomains.io"
OLD, NEW = "v1beta1", "v1beta2"
CD_PLURAL = api_crds.COMPUTE_DOMAIN.plural
CLIQUE_PLURAL = api_crds.CLIQUE.plural
CD_CRD = f"{CD_PLURAL}.{GROUP}"
CLIQUE_CRD = f"{CLIQUE_PLURAL}.{GROUP}"


def test_crd(
    resource: api_crds.CustomResource, *, storage: str, new_max_nodes: int | None = None
) -> dict[str, Any]:
    """``resource``'s CRD in :data:`GROUP` serving OLD and NEW (same schema), ``storage`` stored.

    ``new_max_nodes`` makes NEW's schema stricter than OLD's (a ComputeDomain's
    ``spec.numNodes`` at most that), so an object stored at OLD can be invalid at NEW.
    """
    crd = copy.deepcopy(api_crds.manifest(resource))
    # v1beta1's schema (it keeps numNodes, which the invalid-object case relies on).
    versions = crd["spec"]["versions"]
    template = next((v for v in versions if v["name"] == constants.VERSION), versions[0])
    crd["metadata"] = {"name": f"{resource.plural}.{GROUP}"}
    crd["spec"]["group"] = GROUP
    crd["spec"]["names"].pop("shortNames", None)
    crd["spec"]["versions"] = [
        {**copy.deepcopy(template), "name": v, "storage": v == storage} for v in (OLD, NEW)
    ]
    crd["spec"]["conversion"] = {"strategy": "None"}
    spec = crd["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"].get("spec")
    if new_max_nodes is not None and spec is not None:
        spec["properties"]["numNodes"]["maximum"] = new_max_nodes
    return crd


def install_crds(api: client.ApiClient, *, storage: str, new_max_nodes: int | None = None) -> None:
    """Create or replace both test CRDs with ``storage`` as the storage version; wait."""
    ext = client.ApiextensionsV1Api(api)
    for resource in api_crds.RESOURCES:
        body = test_crd(resource, storage=storage, new_max_nodes=new_max_nodes)
        name = body["metadata"]["name"]
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            live = ext.read_custom_resource_definition(name)
            body["metadata"]["resourceVersion"] = live.metadata.resource_version
            ext.replace_custom_resource_definition(name, body)
        waiting.until(
            f"CRD {name} Established",
            functools.partial(kube.crd_established, ext, name),
            timeout=30,
        )
    waiting.until(
        f"{GROUP}/{storage} served",
        lambda: len(client.CustomObjectsApi(api).get_api_resources(GROUP, storage).resources) >= 2,
        timeout=30,
        retry_on=(ApiException,),
    )


@contextlib.contextmanager
def installed_crds(api: client.ApiClient, *, storage: str) -> Iterator[None]:
    """Both test CRDs at ``storage`` for the ``with`` block; removed after it."""
    install_crds(api, storage=storage)
    try:
        yield
    finally:
        remove_crds(api)


def remove_crds(api: client.ApiClient) -> None:
    """Delete both test CRDs and wait until they are gone."""
    ext = client.ApiextensionsV1Api(api)
    for name in (CD_CRD, CLIQUE_CRD):
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def gone() -> bool:
        names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        return not names & {CD_CRD, CLIQUE_CRD}

    waiting.until("test CRDs deleted", gone, timeout=120)


def compute_domain(name: str, namespace: str, *, num_nodes: int = 0) -> dict[str, Any]:
    """A test-group ComputeDomain at the old version."""
    return {
        "apiVersion": f"{GROUP}/{OLD}",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace, "labels": {"batch": "migration"}},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": name}}},
    }


def create_domains(api: client.ApiClient, objects: list[dict[str, Any]], *, workers: int) -> None:
    """Create ComputeDomains concurrently (a benchmark creates thousands)."""
    custom = client.CustomObjectsApi(api)

    def create(obj: dict[str, Any]) -> None:
        custom.create_namespaced_custom_object(
            GROUP, OLD, obj["metadata"]["namespace"], CD_PLURAL, obj
        )

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(create, objects))


def list_all(api: client.ApiClient, plural: str, version: str = NEW) -> list[dict[str, Any]]:
    """Every object of ``plural`` in every namespace (paged)."""
    custom = client.CustomObjectsApi(api)
    items: list[dict[str, Any]] = []
    token = None
    while True:
        page = custom.list_cluster_custom_object(GROUP, version, plural, limit=500, _continue=token)
        items.extend(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            return items


def hook(kubeconfig: pathlib.Path, name: str, *args: str) -> list[str]:
    """The argv of ``computedomains hooks <name>`` run locally against ``kubeconfig``."""
    return [
        sys.executable,
        "-m",
        "computedomains",
        "hooks",
        name,
        "--kubeconfig",
        str(kubeconfig),
        *args,
    ]


def run_hook(argv: list[str], *, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a hook to completion; its output and exit code."""
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=os.environ.copy(), check=False
    )


# -- what etcd stores ------------------------------------------------------------------------


def etcd_url(sim: sim_cluster.SimCluster) -> str:
    """The simulated cluster's etcd client URL (the API server's ``--etcd-servers``)."""
    assert sim.control_plane is not None and sim.control_plane.etcd_url
    return sim.control_plane.etcd_url


def stored(etcd: str, plural: str, *, group: str = GROUP) -> Iterator[tuple[str, str]]:
    """``(key, apiVersion)`` of every object of ``plural`` as etcd holds it.

    Custom resources are stored as JSON; the ``apiVersion`` in the stored bytes is the
    version they were encoded at. Read through etcd's JSON gateway, a page at a time.
    """
    prefix = f"/registry/{group}/{plural}/".encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    start = prefix
    while True:
        body = json.dumps(
            {
                "key": base64.b64encode(start).decode(),
                "range_end": base64.b64encode(end).decode(),
                "limit": 1000,
            }
        ).encode()
        request = urllib.request.Request(f"{etcd}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        kvs = answer.get("kvs") or []
        for kv in kvs:
            key = base64.b64decode(kv["key"])
            value = json.loads(base64.b64decode(kv["value"]))
            yield key[len(prefix) :].decode(), str(value.get("apiVersion"))
        if not answer.get("more"):
            return
        start = base64.b64decode(kvs[-1]["key"]) + b"\x00"
