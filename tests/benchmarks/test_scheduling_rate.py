"""Benchmark: how fast pods claiming a domain's channel are bound, against a plain DRA claim.

On the 36-node chart cluster, in the same run: 72 pods (2 per node) claiming a device of a
plain DRA driver (``sim/plaindra.py``: no holds, no binding conditions, no controller), then 72
pods of one ComputeDomain on the same nodes, twice: first on free nodes (the domain placing
alone has the turn: free nodes are tainted for it and its claims bind without waiting in
PreBind), then, once those are Ready and the domain formed, again while the domain holds the
nodes. Measured: pods created → every pod bound (``spec.nodeName``), as pods bound per second;
the ratios are the figures.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client, watch

from cdsim import cluster, plaindra
from computedomains import waiting
from computedomains.kube import client as kube_client
from tests.benchmarks import publishing, report, workload
from tests.benchmarks import test_formation as formation
from tests.benchmarks.conftest import NAMESPACE
from tests.support import domains, kube

PER_NODE = 2
PLAIN_TEMPLATE = "plain"


def _bound(api: Any, template: str, nodes: list[str], tag: str) -> float:
    """Create ``PER_NODE`` pods per node claiming from ``template`` as a Job would
    (:mod:`workload`); seconds until all bound."""
    core = client.CoreV1Api(api)
    want = len(nodes) * PER_NODE
    bodies = [
        {
            "metadata": {"name": f"{tag}-{node[-6:]}-{i}", "labels": {"run": tag}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "c", "resourceClaimTemplateName": template}],
                "containers": [{"name": "main", "image": "busybox:1.37",
                                "resources": {"claims": [{"name": "c"}]}}],
            },
        }
        for node in nodes
        for i in range(PER_NODE)
    ]  # fmt: skip
    started = time.monotonic()
    workload.create_pods(api, NAMESPACE, bodies)
    bound: set[str] = set()
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    events = stream.stream(  # type: ignore[no-untyped-call]
        core.list_namespaced_pod, NAMESPACE, label_selector=f"run={tag}", timeout_seconds=300
    )
    for event in events:
        if event["object"].spec.node_name:
            bound.add(event["object"].metadata.name)
        if len(bound) == want:
            stream.stop()  # type: ignore[no-untyped-call]
            return time.monotonic() - started
    raise AssertionError(f"{want} pods of {tag} not bound within 300 s: {len(bound)} are")


def _settled(api: Any, domain: dict[str, Any], tag: str, want: int) -> None:
    """Wait until the ``want`` pods of wave ``tag`` are Ready and ``domain`` is Ready."""
    core, name = client.CoreV1Api(api), domain["metadata"]["name"]

    def settled() -> bool:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"run={tag}").items
        ready = [p for p in pods if (c := kube.pod_condition(p, "Ready")) and c.status == "True"]
        status = domains.get_domain(api, NAMESPACE, name).get("status") or {}
        return len(ready) == want and status.get("status") == "Ready"

    waiting.until(f"the {want} pods of {tag} and ComputeDomain {name} Ready", settled,
                  timeout=600, interval=1)  # fmt: skip


@pytest.mark.timeout(1800)
def test_scheduling_rate_of_domain_claims_against_plain_claims(
    installed: tuple[cluster.SimCluster, Any, str],
) -> None:
    sim, api, _ = installed
    nodes = sorted(n.metadata.name for n in publishing.sim_nodes(api))
    pods = len(nodes) * PER_NODE
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        NAMESPACE, plaindra.claim_template(PLAIN_TEMPLATE, NAMESPACE)
    )
    lean = kube_client.Client.from_kubeconfig(sim.kubeconfig)
    with plaindra.running(lean, sim.host_trees, devices=PER_NODE):
        plain_s = _bound(api, PLAIN_TEMPLATE, nodes, "plain")
        formation.delete_pods(api, "plain")
    domain = domains.create_domain(api, NAMESPACE)
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    free_s = _bound(api, template, nodes, "free")  # first pods: on the domain's turn
    _settled(api, domain, "free", pods)  # the held wave must not share the machine with forming
    held_s = _bound(api, template, nodes, "held")  # the domain holds every node now
    waited = {tag: workload.conditional_claims(api, NAMESPACE, tag) for tag in ("free", "held")}
    rates = {name: pods / s for name, s in
             (("plain", plain_s), ("free", free_s), ("held", held_s))}  # fmt: skip
    figures = {
        "nodes": len(nodes),
        "pods_per_wave": pods,
        "plain_claim_bound_s": round(plain_s, 2),
        "domain_claim_free_nodes_bound_s": round(free_s, 2),
        "domain_claim_held_nodes_bound_s": round(held_s, 2),
        "pods_bound_per_s": {k: round(v, 1) for k, v in rates.items()},
        "ratio_free_nodes_vs_plain": round(rates["free"] / rates["plain"], 3),
        "ratio_held_nodes_vs_plain": round(rates["held"] / rates["plain"], 3),
        "claims_with_binding_conditions": {k: f"{w} of {n}" for k, (w, n) in waited.items()},
    }
    report.save(
        "scheduling-rate",
        figures,
        plots=[
            report.Plot(
                name="rate",
                title=f"Pods bound per second, {pods} pods on {len(nodes)} nodes",
                labels=[
                    "plain DRA claim (baseline)",
                    "domain claim, free nodes",
                    "domain claim, held nodes",
                ],
                series={"pods/s": [rates["plain"], rates["free"], rates["held"]]},
                unit="pods per second",
            )
        ],
    )
    formation.delete_pods(api, "free")
    formation.delete_pods(api, "held")
    # The paths meant were measured: a domain placing alone waits for no binding condition.
    assert waited["free"][1] == waited["held"][1] == pods, waited
    assert waited["free"][0] == waited["held"][0] == 0, waited
