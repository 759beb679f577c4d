"""Adoption of an install shaped like the incumbent's (NVIDIA's DRA driver, ComputeDomain half).

What the incumbent leaves in a cluster: the v1beta1-only CRDs owned by its Helm release,
ComputeDomains with its finalizer and status, per domain an IMEX daemon DaemonSet and a daemon
ResourceClaimTemplate in its namespace, the workload ResourceClaimTemplate in the domain's
namespace, and its node labels. Its own processes are not simulated (its daemon pods are plain
kwok pods); its workload pods are replaced by new ones of the same domain after the install.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants
from computedomains.api import crds as api_crds
from tests.chart import rendering
from tests.support import clusters, domains, kube, lifecycle

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

INCUMBENT_RELEASE = "nvidia-dra-driver-gpu"
NODES = ["gb200-r0-n02", "gb200-r0-n03"]
V1 = constants.VERSION


def incumbent_crd(resource: api_crds.CustomResource, namespace: str) -> dict[str, Any]:
    """Our v1beta1 schema as the incumbent ships it: one version, no conversion, its owner."""
    crd = copy.deepcopy(api_crds.manifest(resource, storage_version=V1))
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == V1]
    crd["spec"].pop("conversion", None)
    crd["metadata"] = {
        "name": resource.name,
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {
            "meta.helm.sh/release-name": INCUMBENT_RELEASE,
            "meta.helm.sh/release-namespace": namespace,
        },
    }
    return crd


def incumbent_domain(api: client.ApiClient, namespace: str, driver_ns: str) -> dict[str, Any]:
    """A ComputeDomain with the incumbent's finalizer, status and per-domain objects."""
    custom = client.CustomObjectsApi(api)
    name = "adopted"
    template = f"{name}-channel"
    domain = cast(
        dict[str, Any],
        custom.create_namespaced_custom_object(
            constants.GROUP,
            V1,
            namespace,
            constants.COMPUTE_DOMAIN_PLURAL,
            {
                "apiVersion": constants.API_VERSION,
                "kind": constants.COMPUTE_DOMAIN_KIND,
                "metadata": {"name": name, "finalizers": [constants.FINALIZER]},
                "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": template}}},
            },
        ),
    )
    uid = domain["metadata"]["uid"]
    domain["status"] = {
        "status": "Ready",
        "nodes": [
            {
                "name": n,
                "ipAddress": f"10.9.0.{i}",
                "cliqueID": "c.1",
                "index": i,
                "status": "Ready",
            }
            for i, n in enumerate(NODES)
        ],
    }
    custom.replace_namespaced_custom_object_status(
        constants.GROUP, V1, namespace, constants.COMPUTE_DOMAIN_PLURAL, name, domain
    )
    labels = {constants.COMPUTE_DOMAIN_LABEL: uid}
    per_domain = f"computedomain-daemon-{uid}"
    resource = client.ResourceV1Api(api)
    claim_spec = {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "daemon",
                        "exactly": {"deviceClassName": constants.DAEMON_DEVICE_CLASS},
                    }
                ]
            }
        }
    }
    resource.create_namespaced_resource_claim_template(
        driver_ns,
        {
            "metadata": {
                "name": per_domain,
                "labels": {**labels, constants.COMPUTE_DOMAIN_TARGET_LABEL: "Daemon"},
                "finalizers": [constants.FINALIZER],
            },
            "spec": claim_spec,
        },
    )
    resource.create_namespaced_resource_claim_template(
        namespace,
        {
            "metadata": {
                "name": template,
                "labels": {**labels, constants.COMPUTE_DOMAIN_TARGET_LABEL: "Workload"},
                "finalizers": [constants.FINALIZER],
            },
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": constants.CHANNEL_REQUEST,
                                "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS},
                            }
                        ]
                    }
                }
            },
        },
    )
    client.AppsV1Api(api).create_namespaced_daemon_set(
        driver_ns,
        {
            "metadata": {"name": per_domain, "labels": labels, "finalizers": [constants.FINALIZER]},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": labels,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "compute-domain-daemon",
                                "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0",
                                "command": ["compute-domain-daemon", "run"],
                            }
                        ],
                    },
                },
            },
        },
    )
    core = client.CoreV1Api(api)
    for node in NODES:
        core.patch_node(node, {"metadata": {"labels": labels}})
    return domain


@pytest.mark.parametrize("major", rendering.MAJORS)
def test_install_adopts_an_incumbent_install_and_every_domain_is_ready_again(
    major: str,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
) -> None:
    release = releases.new("cd-adopt", major)
    incumbent_ns = f"{INCUMBENT_RELEASE}-{release.namespace[-4:]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": incumbent_ns}})
    ext = client.ApiextensionsV1Api(api)
    try:
        for resource in api_crds.RESOURCES:
            ext.create_custom_resource_definition(incumbent_crd(resource, incumbent_ns))
        waiting.until(
            "the incumbent's CRDs to be served",
            lambda: client.CustomObjectsApi(api).list_namespaced_custom_object(
                constants.GROUP, V1, namespace, constants.COMPUTE_DOMAIN_PLURAL
            ),
            timeout=60,
            retry_on=(ApiException,),
        )
        domain = incumbent_domain(api, namespace, incumbent_ns)
        uid = domain["metadata"]["uid"]
        per_domain = f"computedomain-daemon-{uid}"

        # Helm's own ownership check stops a plain install before any hook; with
        # --take-ownership but without adopt.enabled, preflight refuses and names the owner.
        refused = release.helm.attempt(
            "install",
            release.name,
            *cluster.chart(),
            *release.take_ownership(),
            "--namespace",
            release.namespace,
            *rendering.sim_values(),
            "--wait",
            "--timeout",
            "5m",
        )
        assert refused.returncode != 0
        fullname = f"{release.name}-compute-domains"
        preflight_log = kube.job_log(
            cluster, release.namespace, f"{fullname}-hook-preflight", "preflight"
        )
        assert INCUMBENT_RELEASE in preflight_log and "adopt.enabled=true" in preflight_log, (
            preflight_log
        )
        release.helm.run("uninstall", release.name, "--namespace", release.namespace, "--no-hooks")

        release.install(
            *cluster.chart(),
            *release.take_ownership(),
            *rendering.sim_values(),
            "--set",
            "adopt.enabled=true",
            "--set",
            f"adopt.incumbentNamespace={incumbent_ns}",
        )
        crd = ext.read_custom_resource_definition(lifecycle.CRD_NAMES[0])
        assert crd.metadata.annotations["meta.helm.sh/release-name"] == release.name
        assert lifecycle.crd_versions(api) == (
            [constants.VERSION, constants.VERSION_V1BETA2],
            [constants.VERSION_V1BETA2],
        )
        apps = client.AppsV1Api(api)

        def retired() -> bool:
            left = apps.list_namespaced_daemon_set(incumbent_ns).items
            templates = client.ResourceV1Api(api).list_namespaced_resource_claim_template(
                incumbent_ns
            )
            return not left and not templates.items

        waiting.until(
            f"the incumbent's DaemonSet and template {per_domain} to be retired",
            retired,
            timeout=180,
            interval=1,
        )
        pods = domains.workers(api, namespace, domain, NODES)
        ready = domains.wait_ready(api, namespace, domain, pods)
        assert ready["metadata"]["uid"] == uid
        assert lifecycle.condition(ready, "Ready").get("status") == "True"
        assert {n["name"] for n in ready["status"]["nodes"]} == set(NODES)
        domains.delete_pods(api, namespace, domain["metadata"]["name"])
    finally:
        # Waited for: a DaemonSet of the incumbent left behind makes every later release test's
        # preflight refuse (it finds an incumbent install).
        core.delete_namespace(incumbent_ns)
        waiting.until(
            f"the incumbent's namespace {incumbent_ns} to be deleted",
            lambda: incumbent_ns not in {n.metadata.name for n in core.list_namespace().items},
            timeout=180,
            interval=1,
        )
