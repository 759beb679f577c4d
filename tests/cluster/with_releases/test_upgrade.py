"""Upgrade from the previous chart (v0.1.0) with live domains, then roll back to it.

The previous release really runs: its chart from git, its components from its own image, built
from its commit and pulled from the cluster's registry. Hooks really run as Jobs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants
from computedomains.hooks import daemonsetpods
from tests.chart import rendering
from tests.support import clusters, domains, kube, lifecycle, migration, previous

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

NODES = ["gb200-r1-n00", "gb200-r1-n01", "gb200-r1-n02"]
LATE_NODE = "gb200-r1-n03"
"""Idle during the upgrade (its agent rolled), in the clique of the domain's nodes."""
V1, V2 = constants.VERSION, constants.VERSION_V1BETA2


def test_upgrade_keeps_every_pod_and_slot_then_rollback_loses_nothing(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    releases: lifecycle.Releases,
) -> None:
    old = previous.build()
    release = lifecycle.install_previous(releases, sim, api, old, "cd-up")
    ns = release.namespace
    domain, pods = lifecycle.live_domain(api, namespace, NODES, num_nodes=3)
    before = lifecycle.observe(api, namespace, ns, domain, version=V1)
    assert sorted(before.slots) == NODES

    # One step to v1beta2 storage would leave no way back, not even for --atomic: preflight
    # refuses it before anything is applied, and the atomic rollback finds nothing changed.
    refused = release.helm.attempt(
        "upgrade", release.name, *cluster.chart(), *rendering.sim_values(),
        "--namespace", ns, "--atomic", "--wait", "--timeout", "8m",
    )  # fmt: skip
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "rolled back due to atomic being set" in said
    assert "must appear in spec.versions" not in said, "no CRD validation error"
    # Helm printed the refusal itself (the hook's log, hook-output-log-policy).
    assert "neither helm rollback nor --atomic could go back" in said, said
    fullname = f"{release.name}-compute-domains"
    preflight_log = kube.job_log(cluster, ns, f"{fullname}-hook-preflight", "preflight")
    assert "neither helm rollback nor --atomic could go back" in preflight_log
    assert "upgrade in two steps" in preflight_log and "crds.storageVersion=v1beta1" in (
        preflight_log
    )
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == ([V1], [V1])
    assert lifecycle.observe(api, namespace, ns, domain, version=V1) == before

    # The two steps: v1beta2 served while v1beta1 is stored (the previous revision stays
    # reachable), then v1beta2 stored.
    started = time.monotonic()
    release.upgrade(
        *cluster.chart(), *rendering.sim_values(), "--set", "crds.storageVersion=v1beta1",
        "--atomic",
    )  # fmt: skip
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == ([V1, V2], [V1])
    release.upgrade(
        *cluster.chart(), "--reuse-values", "--set", "crds.storageVersion=v1beta2",
        "--atomic",
    )  # fmt: skip
    upgrade_seconds = time.monotonic() - started
    print(
        f"helm upgrade 0.1.0 -> 0.2.0 in two steps with {len(sim.nodes)} nodes and a live "
        f"domain: "
        f"{upgrade_seconds:.1f} s"
    )

    # Nothing the workload sees moved: same pods, no restarts, same slots.
    after = lifecycle.observe(api, namespace, ns, domain, version=V2)
    assert after == before
    name = domain["metadata"]["name"]

    def ready_at_v2() -> dict[str, Any] | None:
        found = domains.get_domain(api, namespace, name, version=V2)
        return found if lifecycle.condition(found, "Ready").get("status") == "True" else None

    # The old status has no conditions: they come with the new controller's first round,
    # which Helm does not wait for (the new controller is ready once its caches are synced).
    current = waiting.until(
        "the new controller's Ready condition on the upgraded domain", ready_at_v2, timeout=60
    )
    assert current["metadata"]["annotations"]["computedomains.io/num-nodes"] == "3"
    # Every object is stored at v1beta2 and the CRDs say so.
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == ([V1, V2], [V2])
    etcd = migration.etcd_url(sim)
    for plural in (constants.COMPUTE_DOMAIN_PLURAL, constants.CLIQUE_PLURAL):
        versions = {v for _, v in migration.stored(etcd, plural, group=constants.GROUP)}
        assert versions == {constants.API_VERSION_V1BETA2}, plural
    # The hooks ran and said what they did.
    migrate_log = kube.job_log(cluster, ns, f"{fullname}-hook-migrate", "migrate")
    assert "storedVersions" in migrate_log, migrate_log
    verify_log = kube.job_log(cluster, ns, f"{fullname}-hook-verify", "verify")
    assert "clique" in verify_log.lower(), verify_log

    # Rollback: storage goes back to v1beta1 first (the previous CRDs know no v1beta2),
    # then the previous revision comes back.
    release.upgrade(*cluster.chart(), "--reuse-values", "--set", "crds.storageVersion=v1beta1")
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd)[1] == [V1]
    release.run("rollback", "1", "--wait", "--timeout", "8m")
    for crd in lifecycle.CRD_NAMES:
        assert lifecycle.crd_versions(api, crd) == ([V1], [V1])
    rolled = domains.wait_ready(api, namespace, domain, pods, version=V1)
    assert rolled["spec"]["numNodes"] == 3
    assert "computedomains.io/num-nodes" not in (rolled["metadata"].get("annotations") or {})
    assert lifecycle.observe(api, namespace, ns, domain, version=V1) == before

    # The agents of the nodes that were idle run this release still (OnDelete) beside the
    # previous controller, which keeps no membership record: they follow the node labels
    # again, as its own agents do, with no step by hand (docs/upgrade.md, To 0.1.x). A new
    # domain on such a node, in the clique whose object still names the first domain's
    # members, forms.
    ours = {
        p.spec.node_name
        for p in client.CoreV1Api(api)
        .list_namespaced_pod(ns, label_selector=f"{constants.COMPONENT_LABEL}=imex-agent")
        .items
        if p.metadata.labels.get(daemonsetpods.VERSION_LABEL) == cluster.version()
    }
    assert LATE_NODE in ours, ours
    late = domains.create_domain(api, namespace, version=V1, num_nodes=1)
    late_pods = domains.workers(api, namespace, late, [LATE_NODE])
    try:
        domains.wait_ready(api, namespace, late, late_pods, version=V1)
    except waiting.WaitTimeout as exc:
        raise AssertionError(f"{exc}\n{_state_of(api, sim, namespace, ns, late)}") from exc


def _state_of(
    api: client.ApiClient, sim: sim_cluster.SimCluster, namespace: str, ns: str,
    domain: dict[str, Any],
) -> str:  # fmt: skip
    """What a domain that did not form shows: its pods and their Events, its node's label, its
    clique objects, and the node's IMEX status file."""
    core = client.CoreV1Api(api)
    name, uid = domain["metadata"]["name"], domain["metadata"]["uid"]
    lines = []
    for pod in core.list_namespaced_pod(namespace, label_selector=f"domain={name}").items:
        lines.append(f"pod {pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name}")
        for event in core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
        ).items[-5:]:
            lines.append(f"  event {event.reason}: {event.message}")
    labels = core.read_node(LATE_NODE).metadata.labels or {}
    lines.append(f"node {LATE_NODE} label: {labels.get(constants.COMPUTE_DOMAIN_LABEL)}")
    for clique in domains.cliques(api, ns, uid, version=V1):
        lines.append(f"clique {clique['metadata']['name']}: {clique.get('daemons')} "
                     f"{clique['metadata'].get('annotations')}")  # fmt: skip
    agents = core.list_namespaced_pod(
        ns, label_selector=f"{constants.COMPONENT_LABEL}=imex-agent",
        field_selector=f"spec.nodeName={LATE_NODE}",
    ).items  # fmt: skip
    for agent in agents:
        lines.append(f"agent {agent.metadata.name} {agent.metadata.uid} "
                     f"{agent.metadata.labels.get(daemonsetpods.VERSION_LABEL)} "
                     f"{agent.status.phase} "
                     f"deleting={agent.metadata.deletion_timestamp}")  # fmt: skip
        try:
            log = core.read_namespaced_pod_log(agent.metadata.name, ns, tail_lines=15)
        except client.ApiException as exc:
            log = f"(no log: {exc.status})"
        lines.append(f"  log: {log}")
    status = sim.host_trees[LATE_NODE].root / "var/run/compute-domains/imex/status.json"
    lines.append(f"status: {status.read_text() if status.exists() else 'none'}")
    return "\n".join(lines)
