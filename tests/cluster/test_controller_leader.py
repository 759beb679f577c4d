"""Two controllers with leader election: one acts, the other takes over when it dies.

Short lease settings (4 s / 3 s / 0.5 s) keep the test quick; the logic is the same as with
the chart's 15 / 10 / 2. Nodes used: rack 1 n00-n09, labels restored afterwards.
"""

from __future__ import annotations

import pathlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants
from tests.support import clusters, kube, plugin
from tests.support.controller import (
    Agents,
    ControllerProcess,
    G,
    NodeLabels,
    V,
    create_domain,
    custom,
    delete_domain,
    slots,
    wait_slots,
    wait_status,
)

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

LEASE = "ctl-test"
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 4, 3, 0.5
NODES = [f"gb200-r1-n{i:02d}" for i in range(10)]


@pytest.fixture
def driver_ns(api: client.ApiClient) -> Iterator[str]:
    name = f"cd-le-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(api, name)
    yield name
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def pair(
    cluster: clusters.TestCluster, sim: sim_cluster.SimCluster, driver_ns: str,
    tmp_path: pathlib.Path,
) -> Iterator[dict[str, ControllerProcess]]:  # fmt: skip
    """Two replicas, as the chart runs them (by pod name)."""
    plugin.install_crds(cluster.api())
    args = (
        "--leader-elect", f"--lease-name={LEASE}", f"--lease-duration={LEASE_SECONDS}",
        f"--renew-deadline={RENEW_SECONDS}", f"--retry-period={RETRY_SECONDS}",
    )  # fmt: skip
    replicas = {
        name: ControllerProcess(kubeconfig=cluster.kubeconfig, namespace=driver_ns,
                                log_dir=tmp_path, name=name, args=args)
        for name in ("ctl-a", "ctl-b")
    }  # fmt: skip
    for replica in replicas.values():
        replica.start()
    yield replicas
    for replica in replicas.values():
        replica.stop()


def lease(api: client.ApiClient, namespace: str) -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease(LEASE, namespace)


def holder(api: client.ApiClient, namespace: str) -> str:
    try:
        return str(lease(api, namespace).spec.holder_identity or "")
    except ApiException:
        return ""


def test_the_standby_takes_over_a_killed_leader_without_moving_a_slot(
    api: client.ApiClient, namespace: str, driver_ns: str, pair: dict[str, ControllerProcess],
    sim: sim_cluster.SimCluster,
) -> None:  # fmt: skip
    name = waiting.until(
        "a leader",
        lambda: next((n for n in pair if holder(api, driver_ns).startswith(f"{n}-")), None),
        timeout=30,
    )
    leader = pair[name]
    standby = next(r for r in pair.values() if r is not leader)
    assert leader.sample("computedomains_controller_leader") == 1
    assert standby.sample("computedomains_controller_leader") == 0
    assert standby.probe("/readyz") == 200  # a standby is Ready too
    first = lease(api, driver_ns)
    assert first.spec.lease_duration_seconds == LEASE_SECONDS
    assert first.spec.holder_identity.startswith(f"{name}-")

    clique = next(n.clique for n in sim.nodes if n.name == NODES[0])
    assert clique is not None
    labels, agents = NodeLabels(api, claims_namespace=namespace), Agents(api, driver_ns)
    try:
        agents.ensure(NODES)
        uid = create_domain(api, namespace)
        labels.set(NODES, clique=clique)
        labels.set(NODES[:6], domain=uid)  # a claim of the domain allocated on each
        agents.report(NODES[:6], uid, "Ready")
        wait_status(api, namespace, "6/6")
        before = slots(api, driver_ns, uid)[clique]
        assert sorted(before.values()) == list(range(6))

        # Churn, and the leader dies in the middle of it.
        labels.set([NODES[1]], domain=None)  # leaves; its IMEX still runs
        labels.set(NODES[6:8], domain=uid)
        killed_at = time.monotonic()
        leader.kill()
        agents.report(NODES[6:8], uid, "Ready")
        new_holder = waiting.until(
            "the standby to take the lease",
            lambda: (h := holder(api, driver_ns)).startswith(f"{standby.name}-") and h,
            timeout=LEASE_SECONDS * 4,
        )  # fmt: skip
        took = time.monotonic() - killed_at
        print(f"\nthe standby took over {took:.1f}s after the leader was killed "
              f"(lease {LEASE_SECONDS}s, retry {RETRY_SECONDS}s)")  # fmt: skip
        assert took <= LEASE_SECONDS + 2 * RETRY_SECONDS + 2  # the lease time, and polling
        assert lease(api, driver_ns).spec.lease_transitions >= 1
        assert new_holder != first.spec.holder_identity

        # The new leader finishes the churn: nothing held moved, newcomers got free slots.
        wait_status(api, namespace, "7/7")
        after = slots(api, driver_ns, uid)[clique]
        for node, index in before.items():
            assert after[node] == index, f"{node} moved from {index} to {after[node]}"
        assert {after[NODES[6]], after[NODES[7]]} == {6, 7}  # slot 1 is still held
        agents.report([NODES[1]], uid, "Stopped")
        expected = {n: i for n, i in after.items() if n != NODES[1]}
        wait_slots(api, driver_ns, uid, {clique: expected}, "the leaver's slot freed")
        assert standby.conflicts() == 0

        # A leader that is stopped gives the lease up at once.
        standby.stop()
        waiting.until("the lease released", lambda: holder(api, driver_ns) == "", timeout=15)
        standby.start()  # for the clean-up below
        waiting.until("the lease taken again", lambda: holder(api, driver_ns), timeout=30)
        labels.set(NODES, domain=None)
        agents.report(NODES, uid, "Stopped")
        wait_slots(api, driver_ns, uid, {}, "every slot freed")
        delete_domain(api, namespace)
    finally:
        labels.restore()
        _release(api, namespace)


def _release(api: client.ApiClient, namespace: str) -> None:
    """After a failure: drop the finalizer, so the namespace can go without a controller."""
    try:
        custom(api).patch_namespaced_custom_object(
            G,
            V,
            namespace,
            constants.COMPUTE_DOMAIN_PLURAL,
            "cd",
            {"metadata": {"finalizers": None}},
        )
    except ApiException as exc:
        if kube.status_of(exc) != 404:
            raise
