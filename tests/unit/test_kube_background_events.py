"""The background Event writer: emitting never waits for the API server, and nothing is lost
that fits in the queue."""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import pytest

from computedomains.kube import client, events
from tests.support.fakeapi import FakeApi

DOMAIN = events.ObjectRef("ComputeDomain", "cd", "ns", "uid-1", api_version="x/v1")
EVENTS = "/api/v1/namespaces/ns/events"


class SlowApi(FakeApi):
    """Every create waits until the test opens the gate, as a saturated API server would."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def create(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().create(path, body, **kwargs)


def _recorder(api: FakeApi, clock: list[float]) -> events.Recorder:
    return events.Recorder(cast(client.Client, api), component="test", clock=lambda: clock[0])


def test_emit_returns_before_the_write_and_the_event_keeps_its_time() -> None:
    api, clock = SlowApi(), [1000.0]
    background = events.BackgroundRecorder(_recorder(api, clock))
    background.start()
    background.emit(DOMAIN, reason="Formed", message="all members ready")
    assert api.calls == []  # emit came back while the write waits at the gate
    clock[0] = 1060.0  # written a minute later, it still says when it happened
    api.gate.set()
    background.close(timeout=10)
    [written] = [obj for path, obj in api.objects.items() if path.startswith(EVENTS)]
    assert (written["reason"], written["count"]) == ("Formed", 1)
    assert written["firstTimestamp"] == written["lastTimestamp"] == "1970-01-01T00:16:40Z"


def test_a_full_queue_drops_and_says_so_and_close_writes_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock = SlowApi(), [0.0]
    background = events.BackgroundRecorder(_recorder(api, clock), capacity=2)
    background.start()
    background.emit(DOMAIN, reason="R0", message="taken by the writer, which waits")
    # The writer holds R0 at the gate; R1 and R2 fill the queue, R3 does not fit.
    assert api.entered.wait(10), "the writer never took R0"
    with caplog.at_level(logging.WARNING, logger=events.__name__):
        for reason in ("R1", "R2", "R3"):
            background.emit(DOMAIN, reason=reason, message="m")
    assert "event queue full: 1 events dropped so far (now R3 on ComputeDomain cd)" in caplog.text
    api.gate.set()
    background.close(timeout=10)
    reasons = sorted(obj["reason"] for path, obj in api.objects.items() if path.startswith(EVENTS))
    assert reasons == ["R0", "R1", "R2"]


def test_flush_waits_for_what_was_queued_and_nothing_is_written_once_fenced() -> None:
    api, clock = FakeApi(), [0.0]
    may_write = threading.Event()
    may_write.set()
    background = events.BackgroundRecorder(_recorder(api, clock), may_write=may_write.is_set)
    background.start()
    background.emit(DOMAIN, reason="Before", message="queued while leading")
    assert background.flush(timeout=10)
    assert [o["reason"] for p, o in api.objects.items() if p.startswith(EVENTS)] == ["Before"]
    may_write.clear()  # the lease is lost: what is queued now must not reach the API server
    background.emit(DOMAIN, reason="After", message="queued, then fenced")
    assert background.flush(timeout=10)
    background.close(timeout=10)
    assert [o["reason"] for p, o in api.objects.items() if p.startswith(EVENTS)] == ["Before"]


def test_discard_drops_a_lost_terms_events_and_releases_a_waiting_flush() -> None:
    api, clock = SlowApi(), [0.0]
    background = events.BackgroundRecorder(_recorder(api, clock))
    background.start()
    background.emit(DOMAIN, reason="R0", message="taken by the writer, which waits")
    assert api.entered.wait(10), "the writer never took R0"
    background.emit(DOMAIN, reason="R1", message="still queued when the term ends")
    flushed = threading.Thread(target=background.flush, args=(10,))
    flushed.start()
    assert background.discard() == 1
    flushed.join(10)
    assert not flushed.is_alive(), "a waiting flush is released"
    api.gate.set()
    background.close(timeout=10)
    reasons = [obj["reason"] for path, obj in api.objects.items() if path.startswith(EVENTS)]
    assert reasons == ["R0"]
