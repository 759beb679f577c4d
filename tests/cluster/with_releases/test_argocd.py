"""The chart as Argo CD syncs it: `helm template`, phases and waves, server-side apply, hooks.

Argo CD has no Helm release and no `lookup`: what it applies is exactly the rendered chart
(tests/support/argo.py plays its application controller). A second sync of the same chart must
change nothing but re-run the hooks, or the Application would never settle.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains.api import constants
from tests.chart import rendering
from tests.support import argo, clusters, domains, kube, lifecycle

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r1-n02", "gb200-r1-n03"]


def test_argo_sync_in_waves_with_hooks_twice_then_delete(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
) -> None:
    app = releases.new("cd-argo", major="helm4")  # Argo CD 3.5 renders with Helm 4 only
    objects = rendering.template(
        app.helm,
        "--include-crds",
        *rendering.sim_values(),
        release=app.name,
        namespace=app.namespace,
        chart=cluster.chart(),  # Argo CD's Helm source: the chart from the registry
    )
    waves = {
        o["kind"]: (o["metadata"].get("annotations") or {}).get(argo.WAVE)
        for o in objects
        if o["kind"] in ("CustomResourceDefinition", "MutatingWebhookConfiguration")
    }
    assert waves == {"CustomResourceDefinition": "-2", "MutatingWebhookConfiguration": "-1"}
    sync = argo.ArgoSync(
        api,
        namespace=app.namespace,
        app=app.name,
        hook_log=lambda job: kube.job_log(
            cluster,
            app.namespace,
            job["metadata"]["name"],
            job["metadata"]["name"].partition("-hook-")[2],
        ),
    )
    domain: dict[str, Any] | None = None
    try:
        first = sync.sync(objects)
        hooks = [label.partition("-hook-")[2] for label in first.hooks if label.startswith("Job/")]
        assert hooks == ["preflight", "migrate", "roll-agents", "verify"]
        assert "passed" in sync.hook_output[f"{app.name}-compute-domains-hook-preflight"]
        lifecycle.wait_plugins(api, {n.name for n in sim.nodes})
        # An incumbent-style manifest (v1beta1) works through the webhook's conversion.
        domain = domains.create_domain(api, namespace, version=constants.VERSION, num_nodes=2)
        pods = domains.workers(api, namespace, domain, NODES)
        domains.wait_ready(api, namespace, domain, pods)

        second = sync.sync(objects)
        assert second.changed == [], f"fields Argo CD would fight over: {second.changed}"
        assert second.hooks == first.hooks
        domains.wait_ready(api, namespace, domain, pods)
    finally:
        if domain is not None:  # the PreDelete hook refuses while its pods run
            domains.delete_pods(api, namespace, str(domain["metadata"]["name"]))
        deleted = sync.delete_application(objects)
    assert "CustomResourceDefinition/computedomains.resource.nvidia.com" not in deleted
    uninstall = sync.hook_output[f"{app.name}-compute-domains-hook-uninstall"]
    assert "Argo CD is deleting the Application" in uninstall, uninstall
