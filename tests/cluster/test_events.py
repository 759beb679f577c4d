"""Events against the real API server: retries grow one object's count, floods are throttled.

The recorder's clock is stepped by the test, so windows and spam refills pass in no time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from computedomains.kube import client as kube_client
from computedomains.kube import events
from tests.support import clusters

pytestmark = pytest.mark.cluster

REASON = "FailedPrepareDynamicResources"
POLICY = events.Policy()


class StepClock:
    """Wall-clock seconds from now, ``step`` more at each reading (from any thread)."""

    def __init__(self, step: float) -> None:
        self.now = time.time()
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.now += self.step
            return self.now


@pytest.fixture
def events_api(cluster: clusters.TestCluster) -> kube_client.Client:
    """The components' own client, which the recorder writes with."""
    return kube_client.Client.from_kubeconfig(cluster.kubeconfig)


def _recorder(api: kube_client.Client, clock: StepClock) -> events.Recorder:
    return events.Recorder(api, component="test-events", host="node-a", clock=clock)


def _pod(namespace: str, name: str = "stuck") -> events.ObjectRef:
    return events.ObjectRef("Pod", name, namespace, uid=f"uid-{name}")


def _rfc3339(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _events_of(api: kube_client.Client, ref: events.ObjectRef) -> list[dict[str, Any]]:
    listing = api.get(
        f"/api/v1/namespaces/{ref.namespace}/events",
        query={"fieldSelector": f"involvedObject.name={ref.name}"},
    )
    return sorted(listing["items"], key=lambda e: e["metadata"]["name"])


def test_a_retried_failure_is_one_event_with_its_count(
    events_api: kube_client.Client, namespace: str
) -> None:
    clock = StepClock(POLICY.refill)  # one retry per refill: the spam filter never drops
    recorder, pod = _recorder(events_api, clock), _pod(namespace)
    first = clock.now + clock.step
    for _ in range(40):
        recorder.emit(pod, reason=REASON, message="IMEX not ready", warning=True)
    [event] = _events_of(events_api, pod)
    assert event["count"] == 40
    assert event["type"] == "Warning"
    assert event["message"] == "IMEX not ready"
    assert event["source"] == {"component": "test-events", "host": "node-a"}
    assert event["firstTimestamp"] == _rfc3339(first)
    assert event["lastTimestamp"] == _rfc3339(clock.now)


def test_two_messages_are_two_events(events_api: kube_client.Client, namespace: str) -> None:
    recorder, pod = _recorder(events_api, StepClock(1)), _pod(namespace)
    for message in ["IMEX not ready", "node in another domain"] * 2 + ["IMEX not ready"]:
        recorder.emit(pod, reason=REASON, message=message, warning=True)
    counts = {e["message"]: e["count"] for e in _events_of(events_api, pod)}
    assert counts == {"IMEX not ready": 3, "node in another domain": 2}


def test_a_flood_is_throttled_and_its_count_caught_up(
    events_api: kube_client.Client, namespace: str
) -> None:
    clock = StepClock(0)  # all at one instant
    recorder, pod = _recorder(events_api, clock), _pod(namespace)
    methods: list[str] = []
    events_api.observer = lambda method, _path, _status: methods.append(method)
    for _ in range(100):
        recorder.emit(pod, reason=REASON, message="IMEX not ready", warning=True)
    assert methods == ["POST"] + ["PATCH"] * (POLICY.burst - 1)
    [event] = _events_of(events_api, pod)
    assert event["count"] == POLICY.burst
    clock.now += POLICY.refill  # one write regained: it carries the dropped occurrences
    recorder.emit(pod, reason=REASON, message="IMEX not ready", warning=True)
    [event] = _events_of(events_api, pod)
    assert event["count"] == 101
    assert methods[POLICY.burst :] == ["GET", "PATCH", "GET"]  # the test's listings and one write


def test_a_deleted_event_is_written_again(events_api: kube_client.Client, namespace: str) -> None:
    recorder, pod = _recorder(events_api, StepClock(1)), _pod(namespace)
    for _ in range(2):
        recorder.emit(pod, reason=REASON, message="IMEX not ready")
    [event] = _events_of(events_api, pod)
    events_api.delete(f"/api/v1/namespaces/{namespace}/events/{event['metadata']['name']}")
    recorder.emit(pod, reason=REASON, message="IMEX not ready")
    [again] = _events_of(events_api, pod)
    assert again["metadata"]["name"] == event["metadata"]["name"]
    assert again["metadata"]["uid"] != event["metadata"]["uid"]
    assert again["count"] == 3


def test_similar_messages_are_combined(events_api: kube_client.Client, namespace: str) -> None:
    recorder, pod = _recorder(events_api, StepClock(1)), _pod(namespace)
    for claim in range(POLICY.similar + 2):
        recorder.emit(pod, reason=REASON, message=f"claim-{claim}: IMEX not ready")
    found = _events_of(events_api, pod)
    assert len(found) == POLICY.similar
    [combined] = [e for e in found if e["message"].startswith(events.COMBINED_PREFIX)]
    assert combined["count"] == 3
    assert combined["message"] == f"{events.COMBINED_PREFIX}claim-11: IMEX not ready"


def test_concurrent_emitters_write_one_event_with_every_occurrence(
    events_api: kube_client.Client, namespace: str
) -> None:
    recorder, pod = _recorder(events_api, StepClock(POLICY.refill)), _pod(namespace)

    def emitter() -> None:
        for _ in range(5):
            recorder.emit(pod, reason=REASON, message="IMEX not ready", warning=True)

    threads = [threading.Thread(target=emitter) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    [event] = _events_of(events_api, pod)
    assert event["count"] == 40
