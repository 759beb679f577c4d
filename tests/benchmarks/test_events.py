"""Event objects a stuck prepare creates per minute: the correlating Recorder vs one per call.

Ten claims whose prepare keeps failing, each retried on the simulated kubelet's schedule
(its capped exponential backoff); every failure is reported on the claim and on its pod, as
the kubelet plugin does. Baseline in the same run: the recorder's former behaviour, one
Event object created per call, reproduced here by creating the Events directly. Both write
to the real API server; ten minutes of retries are simulated by stepping the recorder's
clock instead of waiting.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from cdsim import cluster, topology
from cdsim.kubelet import backoff
from computedomains.kube import client as kube_client
from computedomains.kube import events
from tests.benchmarks import report

CLAIMS = 10
MINUTES = 10
REASON = "FailedPrepareDynamicResources"
MESSAGE = "IMEX daemon of domain 1234 not ready after 45s"

Emit = Callable[[events.ObjectRef, float], None]


@pytest.fixture(scope="module")
def api() -> Iterator[kube_client.Client]:
    sim = cluster.SimCluster(
        name=f"bench-{uuid.uuid4().hex[:6]}",
        topology_spec=topology.Topology(racks=1, nodes_per_rack=1),
        log=lambda _: None,
    )
    with sim:
        yield kube_client.Client.from_kubeconfig(sim.kubeconfig)


def _retries(start: float) -> Iterator[tuple[float, int]]:
    """(simulated second, claim) of every failed prepare, in time order."""
    schedules = [backoff.Backoff() for _ in range(CLAIMS)]
    due = [(start + claim * 0.1, claim) for claim in range(CLAIMS)]  # pods start together
    while due[0][0] < start + MINUTES * 60:
        when, claim = heapq.heappop(due)
        yield when, claim
        heapq.heappush(due, (when + schedules[claim].failed(when), claim))


def _one_create_per_call(api: kube_client.Client) -> Emit:
    """What ``Recorder.emit`` did before correlation: a new Event object every call."""

    def emit(ref: events.ObjectRef, now: float) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        api.create(
            f"/api/v1/namespaces/{ref.namespace}/events",
            {
                "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:12]}"},
                "involvedObject": {"apiVersion": ref.api_version, "kind": ref.kind,
                                   "name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
                "reason": REASON, "message": MESSAGE, "type": "Warning",
                "source": {"component": "bench", "host": "node-a"},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            },
        )  # fmt: skip

    return emit


def _correlated(api: kube_client.Client) -> Emit:
    """The Recorder, its clock set to each retry's simulated time."""
    clock = [0.0]
    recorder = events.Recorder(api, component="bench", host="node-a", clock=lambda: clock[0])

    def emit(ref: events.ObjectRef, now: float) -> None:
        clock[0] = now
        recorder.emit(ref, reason=REASON, message=MESSAGE, warning=True)

    return emit


def _run(api: kube_client.Client, emit: Emit) -> dict[str, float]:
    """Objects and write requests over the first minute and over all minutes, one mode."""
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    writes: list[str] = []

    def observe(method: str, _path: str, _status: int) -> None:
        if method != "GET":  # the benchmark's own listings
            writes.append(method)

    api.observer = observe
    start = time.time()
    figures: dict[str, float] = {}
    latencies = []
    for when, claim in _retries(start):
        if when >= start + 60 and "objects_first_minute" not in figures:
            figures["objects_first_minute"] = _count(api, namespace)
            figures["writes_first_minute"] = len(writes)
        for ref in (
            events.ObjectRef("ResourceClaim", f"claim-{claim}", namespace, f"uid-c{claim}",
                             "resource.k8s.io/v1"),
            events.ObjectRef("Pod", f"pod-{claim}", namespace, f"uid-p{claim}"),
        ):  # fmt: skip
            began = time.perf_counter()
            emit(ref, when)
            latencies.append(time.perf_counter() - began)
    api.observer = None
    objects = _count(api, namespace)
    api.delete(f"/api/v1/namespaces/{namespace}")
    return figures | {
        "emits": len(latencies),
        "objects": objects,
        "objects_per_minute": round(objects / MINUTES, 1),
        "writes_per_minute": round(len(writes) / MINUTES, 1),
        "emit_ms_p50": round(report.summarize(latencies)["p50"] * 1000, 3),
    }


def _count(api: kube_client.Client, namespace: str) -> int:
    return len(api.get(f"/api/v1/namespaces/{namespace}/events")["items"])


def test_event_objects_per_minute_of_a_stuck_prepare(api: kube_client.Client) -> None:
    before = _run(api, _one_create_per_call(api))
    after = _run(api, _correlated(api))
    report.save(
        "events",
        {
            "stuck_claims": CLAIMS,
            "simulated_minutes": MINUTES,
            "one_create_per_call": before,
            "correlated": after,
            "objects_ratio_first_minute": round(
                before["objects_first_minute"] / after["objects_first_minute"], 1
            ),
            "objects_ratio_per_minute": round(
                before["objects_per_minute"] / after["objects_per_minute"], 1
            ),
        },
    )
    assert after["objects"] == 2 * CLAIMS  # one per claim and one per pod, all along
