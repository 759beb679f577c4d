"""The pre-delete hook: uninstall refused while domains run; forced, it leaves nothing behind."""

from __future__ import annotations

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains.api import constants
from tests.chart import rendering
from tests.support import clusters, domains, kube, lifecycle

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r1-n00", "gb200-r1-n01"]


@pytest.mark.parametrize("major", rendering.MAJORS)
def test_uninstall_is_refused_with_running_domains_and_forced_leaves_no_trace(
    major: str,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
) -> None:
    release = releases.new("cd-rm", major)  # helm 4: server-side apply, kstatus waits
    # The host-driver profile (the chart's defaults) once, where the others use gb200-nvl72.
    release.install(*cluster.chart(), *rendering.sim_values("host-driver"))
    lifecycle.wait_plugins(api, {n.name for n in sim.nodes})
    domain = domains.create_domain(api, namespace)
    pods = domains.workers(api, namespace, domain, NODES)
    domains.wait_ready(api, namespace, domain, pods)
    name = domain["metadata"]["name"]

    refused = release.helm.attempt(
        "uninstall", release.name, "--namespace", release.namespace, "--wait", "--timeout", "3m"
    )
    assert refused.returncode != 0
    log = kube.job_log(
        cluster, release.namespace, f"{release.name}-compute-domains-hook-uninstall", "uninstall"
    )
    assert f"{namespace}/{name}" in log and "uninstall.force=true" in log, log
    assert f"helm rollback {release.name}" in log, log
    # Nothing was touched: the domain still runs. Helm left the release "uninstalling"; a
    # rollback to its revision makes it deployed again, so it can be upgraded with the force.
    domains.wait_ready(api, namespace, domain, pods)
    status = release.helm.run("status", release.name, "--namespace", release.namespace)
    assert "STATUS: uninstalling" in status, status
    release.rollback("1")
    release.upgrade(*cluster.chart(), "--reuse-values", "--set", "uninstall.force=true")
    release.run("uninstall", "--wait", "--timeout", "5m")
    left = domains.get_domain(api, namespace, name)
    assert constants.FINALIZER not in (left["metadata"].get("finalizers") or [])
    for node in client.CoreV1Api(api).list_node().items:
        labels = node.metadata.labels or {}
        assert constants.COMPUTE_DOMAIN_LABEL not in labels, node.metadata.name
        conditions = {c.type for c in node.status.conditions or []}
        assert constants.FABRIC_CONDITION not in conditions, node.metadata.name
        assert not [t for t in node.spec.taints or [] if t.key == constants.FABRIC_TAINT]
    # The CRDs stay (keep policy); the hook printed how to delete them.
    assert lifecycle.crd_versions(api)[0]
    log = kube.job_log(
        cluster, release.namespace, f"{release.name}-compute-domains-hook-uninstall", "uninstall"
    )
    assert "kubectl delete crd" in log, log
