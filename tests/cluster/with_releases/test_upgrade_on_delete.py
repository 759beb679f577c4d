"""An upgrade with the production profile's OnDelete IMEX agents, from an early 0.1.0 build,
by either Helm major.

The early build's agents write no heartbeat and no report annotations (tests/support/previous.py
EARLY_0_1_0). The documented upgrade (Helm 3: ``--wait --atomic``; Helm 4: ``--wait=legacy
--rollback-on-failure``) must succeed with a live domain whose jobs keep their IMEX daemons: its
nodes keep their old agents, which the new controller and kubelet plugin must still work with;
the post-upgrade hook replaces the agents of idle nodes only; verify passes and names the nodes
still on 0.1.0. Once the jobs end, the next upgrade rolls the rest.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants
from computedomains.hooks import daemonsetpods
from tests.chart import rendering
from tests.support import clusters, domains, kube, lifecycle, migration, previous

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r1-n02", "gb200-r1-n03"]
V1, V2 = constants.VERSION, constants.VERSION_V1BETA2
AGENT = "imex-agent"


def _agents(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    """Node → the agent pod there (not terminating)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{constants.COMPONENT_LABEL}={AGENT}"
    )
    return {str(p.spec.node_name): p for p in pods.items if not p.metadata.deletion_timestamp}


def _cold_start_webhook(api: client.ApiClient, namespace: str) -> None:
    """Delete every webhook pod; their successors must be Ready within 30 s."""
    core = client.CoreV1Api(api)
    selector = f"{constants.COMPONENT_LABEL}=webhook"
    old = {
        p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=selector).items
    }
    assert old
    core.delete_collection_namespaced_pod(namespace, label_selector=selector)

    def new_ready() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return any(p.metadata.uid not in old and kube.pod_ready(p) for p in pods)

    waiting.until("a new webhook pod to be Ready (objects stored at v1beta1)", new_ready,
                  timeout=30, interval=0.5)  # fmt: skip


@pytest.mark.parametrize("major", rendering.MAJORS)
def test_an_on_delete_upgrade_keeps_running_jobs_on_their_agents_and_rolls_idle_nodes(
    major: str,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
) -> None:
    old = previous.build(previous.EARLY_0_1_0)
    release = lifecycle.install_previous(releases, sim, api, old, "cd-od", major)
    ns = release.namespace
    domain, pods = lifecycle.live_domain(api, namespace, NODES, num_nodes=2)
    before = lifecycle.observe(api, namespace, ns, domain, version=V1)
    imex = {node: domains.imex_pid(sim, node) for node in NODES}
    assert all(imex.values()), imex
    agents = {node: pod.metadata.uid for node, pod in _agents(api, ns).items()}

    # The first of the two steps from 0.1.x: v1beta2 served, v1beta1 still stored, so the
    # previous revision stays reachable (preflight refuses the one-step way: test_upgrade).
    release.upgrade_as_documented(
        *cluster.chart(), *rendering.sim_values(), "--set", "crds.storageVersion=v1beta1"
    )

    # A cold start of the webhook while every object is still stored at v1beta1: Ready
    # within 30 s with its probes executed, and every v1beta2 read served through it.
    etcd = migration.etcd_url(sim)
    for plural in (constants.COMPUTE_DOMAIN_PLURAL, constants.CLIQUE_PLURAL):
        stored = {v for _, v in migration.stored(etcd, plural, group=constants.GROUP)}
        assert stored == {constants.API_VERSION}, plural
    _cold_start_webhook(api, ns)
    custom = client.CustomObjectsApi(api)
    for plural in (constants.COMPUTE_DOMAIN_PLURAL, constants.CLIQUE_PLURAL):
        listed = custom.list_cluster_custom_object(constants.GROUP, V2, plural)["items"]
        assert listed, plural
        for obj in listed:
            meta = obj["metadata"]
            read = custom.get_namespaced_custom_object(
                constants.GROUP, V2, meta["namespace"], plural, meta["name"]
            )
            assert read["apiVersion"] == constants.API_VERSION_V1BETA2

    # The jobs kept everything: pods, slots, the agents on their nodes, IMEX itself.
    assert lifecycle.observe(api, namespace, ns, domain, version=V2) == before
    now = _agents(api, ns)
    assert {n: now[n].metadata.uid for n in NODES} == {n: agents[n] for n in NODES}
    assert {node: domains.imex_pid(sim, node) for node in NODES} == imex
    # Every idle node got the new agent from the roll-agents hook, clique by clique.
    rolled = {
        n
        for n, p in now.items()
        if p.metadata.labels[daemonsetpods.VERSION_LABEL] == cluster.version()
    }
    assert rolled == set(agents) - set(NODES)
    fullname = f"{release.name}-compute-domains"
    roll_log = kube.job_log(cluster, ns, f"{fullname}-hook-roll-agents", "roll-agents")
    for node in NODES:
        assert f"kept: {node} (version 0.1.0): domain {domain['metadata']['uid']}" in roll_log
    verify_log = kube.job_log(cluster, ns, f"{fullname}-hook-verify", "verify")
    assert "2 node(s) still run version 0.1.0" in verify_log, verify_log
    assert f"{NODES[0]}, {NODES[1]}" in verify_log

    # The new plugin prepares beside an old agent: one more pod of the domain on its node.
    name, uid = domain["metadata"]["name"], domain["metadata"]["uid"]
    extra = domains.create_pod(api, namespace, domain, f"{name}-extra", node=NODES[0])
    domains.wait_ready(api, namespace, domain, [*pods, extra], version=V2)

    # The second step (v1beta2 stored) with the jobs still running: they keep their agents,
    # and the new controller, now able to store its conditions, counts the old agents'
    # reports: the domain is Ready.
    release.upgrade_as_documented(
        *cluster.chart(), "--reuse-values", "--set", "crds.storageVersion=v1beta2"
    )
    now = _agents(api, ns)
    assert {n: now[n].metadata.uid for n in NODES} == {n: agents[n] for n in NODES}
    assert {node: domains.imex_pid(sim, node) for node in NODES} == imex

    def ready_at_v2() -> dict[str, Any] | None:
        found = domains.get_domain(api, namespace, name, version=V2)
        return found if lifecycle.condition(found, "Ready").get("status") == "True" else None

    waiting.until("the upgraded domain's Ready condition (old agents counted)", ready_at_v2,
                  timeout=60, retry_on=(ApiException,))  # fmt: skip

    # The jobs end; the next upgrade (same chart, same values) rolls the rest.
    domains.delete_pods(api, namespace, name)

    def released() -> bool:
        cliques = domains.cliques(api, ns, uid, version=V2)
        return not any(d["nodeName"] in NODES for c in cliques for d in c.get("daemons") or [])

    # The old agents say Stopped once the plugin took the label away: only then the slots go.
    waiting.until("the domain's slots on its nodes to be freed", released, timeout=120)
    release.upgrade_as_documented(*cluster.chart(), "--reuse-values")
    versions = {p.metadata.labels[daemonsetpods.VERSION_LABEL] for p in _agents(api, ns).values()}
    assert versions == {cluster.version()}
