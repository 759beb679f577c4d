"""Leadership terms of one controller replica: a lost term's work never spills into the next."""

from __future__ import annotations

import threading
from typing import cast

import prometheus_client

from computedomains.controller import manager, metrics
from computedomains.controller.caches import Caches
from computedomains.waiting import until


class _Caches:
    def __init__(self, uids: list[str]) -> None:
        self.uids = uids

    def domain_uids(self) -> list[str]:
        return list(self.uids)


def test_each_term_has_its_own_queue_and_the_last_terms_keys_stay_behind() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def reconcile(uid: str) -> None:
        with lock:
            seen.append(uid)

    stats = metrics.ControllerMetrics(prometheus_client.CollectorRegistry())
    workers = manager.Workers(
        reconcile=reconcile, caches=cast(Caches, _Caches(["d1"])), collect=lambda: None,
        stats=stats, gc_interval=3600,
    )  # fmt: skip
    first = workers.queue
    workers.start()
    until("term 1 to reconcile every domain", lambda: "d1" in seen, timeout=10)
    assert workers.stop() and workers.alive()
    before = len(seen)
    first.add("late")  # an informer event after the term ended: nobody takes it
    workers.start()
    assert workers.queue is not first and workers.alive()
    until("term 2 to reconcile every domain again", lambda: "d1" in seen[before:], timeout=10)
    assert workers.stop()
    assert "late" not in seen
