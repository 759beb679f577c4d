"""A prepare stuck for half a minute leaves one Event object per (object, reason, message).

The node's fake nvidia-imex is made to fail, so every kubelet retry of the pod's prepare ends
in the same "not ready" error; the plugin reports each on the claim and the pod. Like
client-go's recorder, it grows one Event's count instead of writing a new object per retry.
Half a minute holds several retries (the kubelet backs off 1, 2, 4, 8 and 16 s).
"""

from __future__ import annotations

import collections
import time

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from tests.support import domains

pytestmark = pytest.mark.cluster

NODE = "gb200-r1-n10"
STUCK_SECONDS = 30


def test_a_stuck_prepare_grows_one_event_per_object_reason_and_message(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    fault = sim.host_trees[NODE].root / "var/run/compute-domains/imex/fail"
    fault.parent.mkdir(parents=True, exist_ok=True)
    fault.write_text("bind\n")
    core = client.CoreV1Api(api)
    domain = domains.create_domain(api, namespace)
    try:
        domains.create_pod(api, namespace, domain, "stuck", node=NODE)

        def warnings() -> list[client.CoreV1Event]:
            return [
                e
                for e in core.list_namespaced_event(namespace).items
                if e.type == "Warning" and e.reporting_component == "compute-domains-kubelet-plugin"
            ]

        def one_object_each() -> collections.Counter[tuple[str | None, ...]]:
            objects: collections.Counter[tuple[str | None, ...]] = collections.Counter(
                (e.involved_object.kind, e.involved_object.uid, e.reason, e.message)
                for e in warnings()
            )
            assert all(n == 1 for n in objects.values()), f"duplicate Event objects: {objects}"
            return objects

        waiting.until("the plugin's first Warning about the stuck prepare", warnings, timeout=90)
        started = time.monotonic()
        # Polled through the whole window: the invariant must hold at every look.
        waiting.until(
            f"{STUCK_SECONDS} s of retries with one Event object per object, reason and message",
            lambda: one_object_each() and time.monotonic() - started >= STUCK_SECONDS,
            timeout=STUCK_SECONDS + 15,
            interval=5,
        )
        seen = warnings()
        assert {e.involved_object.kind for e in seen} == {"Pod", "ResourceClaim"}
        occurrences = sum(e.count or 1 for e in seen)
        assert occurrences > len(seen), "the prepare was retried, so some Event must have grown"
        print(
            f"\nstuck prepare, {STUCK_SECONDS} s: {len(seen)} Event objects for "
            f"{occurrences} occurrences (one object each before aggregation)"
        )
        assert core.read_namespaced_pod("stuck", namespace).status.phase == "Pending"
    finally:
        fault.unlink(missing_ok=True)
        domains.delete_pods(api, namespace, domain["metadata"]["name"])
