"""From a refused placement to the pod running elsewhere, against a first placement on a free node.

Per run, two domains' pods are created back to back, both allowed on two free nodes and both
preferring the first: the scheduler allocates both on it, the controller reserves it for the
first and refuses the second (docs/placement.md), and the second runs on the other node. Measured:
from the refusal (seen by polling the claim at 50 ms) to the refused pod Running, and, in the
same run, the winner's time from creation to Running (a first placement on a free node, which
includes the scheduler's PreBind wait for the binding condition). Runs in which the scheduler
did not put both on the same node (no refusal) are counted, not timed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster
from computedomains.api import constants, placement
from tests.benchmarks import report
from tests.support import domains, kube

RUNS = 20
TARGET, FALLBACK = "gb200-r0-n00", "gb200-r0-n01"
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In",
                         "values": [TARGET, FALLBACK]}
                    ]
                }
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [TARGET]}]}}
        ],
    }
}  # fmt: skip


def _refused(api: Any, namespace: str) -> bool:
    for claim in client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items:
        for device in (claim.status.devices if claim.status else None) or []:
            if any(
                c.type == placement.REFUSED_CONDITION and c.status == "True"
                for c in device.conditions or []
            ):
                return True
    return False


def _running(api: Any, namespace: str) -> bool:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return bool(pods) and all(p.status.phase == "Running" for p in pods)


def _one_race(api: Any, tenants: list[str]) -> tuple[float, float] | None:
    """(refusal → loser Running, winner creation → Running), or None without a refusal."""
    created = [domains.create_domain(api, ns) for ns in tenants]
    try:
        started = time.monotonic()
        for ns, domain in zip(tenants, created, strict=True):
            domains.create_pod(api, ns, domain, "worker", affinity=AFFINITY)
        refused_at: dict[int, float] = {}
        running_at: dict[int, float] = {}
        deadline = started + 120
        while time.monotonic() < deadline and len(running_at) < len(tenants):
            now = time.monotonic()
            for i, ns in enumerate(tenants):
                if i not in refused_at and i not in running_at and _refused(api, ns):
                    refused_at[i] = now
                if i not in running_at and _running(api, ns):
                    running_at[i] = now
            time.sleep(0.05)  # the benchmark's sampling interval, not a wait for state
        assert len(running_at) == len(tenants), "the two domains' pods did not both run in 120 s"
        if not refused_at:
            return None
        (loser,) = refused_at
        return running_at[loser] - refused_at[loser], running_at[1 - loser] - started
    finally:
        for ns, domain in zip(tenants, created, strict=True):
            domains.delete_pods(api, ns, domain["metadata"]["name"])
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                constants.GROUP, constants.VERSION, ns, constants.COMPUTE_DOMAIN_PLURAL,
                domain["metadata"]["name"],
            )  # fmt: skip


@pytest.mark.timeout(RUNS * 90)
def test_refused_placement_to_running_elsewhere(
    installed: tuple[cluster.SimCluster, Any, str],
) -> None:
    _, api, _ = installed
    core = client.CoreV1Api(api)
    tenants = [f"race-{uuid.uuid4().hex[:4]}-{i}" for i in range(2)]
    for ns in tenants:
        core.create_namespace({"metadata": {"name": ns}})
        kube.wait_for_default_service_account(api, ns)
    refused_to_running, first_placement = [], []
    no_race = 0
    for _ in range(RUNS):
        timed = _one_race(api, tenants)
        if timed is None:
            no_race += 1
            continue
        refused_to_running.append(timed[0])
        first_placement.append(timed[1])
    assert refused_to_running, f"no run raced for the node in {RUNS} tries"
    loser, winner = report.summarize(refused_to_running), report.summarize(first_placement)
    report.save(
        "placement",
        {
            "runs": RUNS,
            "runs_without_refusal": no_race,
            "refused_to_running_s": loser,
            "first_placement_on_free_node_s": winner,
            "ratio_p50": loser["p50"] / winner["p50"],
        },
    )
