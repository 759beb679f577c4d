"""Preflight refusals as a user meets them: `helm install` fails and prints the hook's message.

Helm 3 and 4 copy a failed hook's log into their own output (the Jobs'
``helm.sh/hook-output-log-policy: hook-failed``), read through the API server's ``pods/log``,
which the simulated kubelet serves as a kubelet does.

Refusals that this cluster cannot produce (Kubernetes older than 1.34, resource.k8s.io/v1 not
served) are decided by the same pure checks and asserted in tests/unit/test_hooks_preflight.py.
"""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains.api import crds as api_crds
from tests.chart import rendering
from tests.support import clusters, kube, lifecycle

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"


def refused_install(cluster: clusters.TestCluster, release: lifecycle.Release, *values: str) -> str:
    """Install with ``values``; asserts helm failed and printed the preflight hook's refusal
    itself, and returns what helm printed."""
    done = release.helm.attempt(
        "install",
        release.name,
        *cluster.chart(),
        "--namespace",
        release.namespace,
        *rendering.sim_values(),
        *values,
        "--wait",
        "--timeout",
        "5m",
        timeout=400,
    )
    assert done.returncode != 0, done.stdout
    assert "pre-install" in done.stderr, done.stderr
    log = kube.job_log(
        cluster,
        release.namespace,
        f"{release.name}-compute-domains-hook-preflight",
        "preflight",
    )
    refusals = [line for line in log.splitlines() if "FAILED:" in line or "fix:" in line]
    assert refusals, log
    missing = [line for line in refusals if line not in done.stderr]
    assert not missing, f"helm did not print the hook's refusal {missing}:\n{done.stderr}"
    return done.stderr


def test_a_crd_owned_by_another_release_is_refused_with_the_adoption_path(
    cluster: clusters.TestCluster, api: client.ApiClient, releases: lifecycle.Releases
) -> None:
    crd = api_crds.manifest(api_crds.CLIQUE)
    crd["metadata"] = {
        "name": api_crds.CLIQUE.name,
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {
            "meta.helm.sh/release-name": "someone-else",
            "meta.helm.sh/release-namespace": "elsewhere",
        },
    }
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    # Helm itself refuses another release's objects unless told to take them over; then it is
    # preflight that refuses, unless adoption is asked for.
    said = refused_install(cluster, releases.new("cd-pre"), "--take-ownership")
    assert "someone-else" in said and "adopt.enabled=true" in said, said


def test_a_driver_root_that_does_not_match_the_nodes_is_refused(
    cluster: clusters.TestCluster, api: client.ApiClient, releases: lifecycle.Releases
) -> None:
    core = client.CoreV1Api(api)
    node = "gb200-r0-n03"
    core.patch_node(node, {"metadata": {"labels": {OPERATOR_DRIVER_LABEL: "pre-installed"}}})
    try:
        said = refused_install(
            cluster,
            releases.new("cd-pre", major="helm4"),
            "--set",
            "driverRoot=/run/nvidia/driver",
        )
    finally:
        with contextlib.suppress(ApiException):
            core.patch_node(node, {"metadata": {"labels": {OPERATOR_DRIVER_LABEL: None}}})
    assert node in said and "values/host-driver.yaml" in said, said


@pytest.mark.parametrize("major", rendering.MAJORS)
def test_a_namespace_that_refuses_privileged_pods_is_refused_in_helms_own_output(
    major: str, cluster: clusters.TestCluster, api: client.ApiClient, releases: lifecycle.Releases
) -> None:
    release = releases.new("cd-psa", major=major)
    client.CoreV1Api(api).patch_namespace(
        release.namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
    )
    said = refused_install(cluster, release)
    assert f"namespace {release.namespace} enforces Pod Security baseline" in said, said
    fix = f"kubectl label namespace {release.namespace} pod-security.kubernetes.io/enforce="
    assert fix in said, said
    # The other node checks ran on every GPU node: the simulated runtime is named as unknown.
    assert "CDI support not checked on node(s) gb200-r0-n00 (kwok://simulated)" in said, said
