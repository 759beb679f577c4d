"""The work queue: dedup, one worker per key, delays and per-key backoff, shutdown."""

from __future__ import annotations

import random
import threading

import pytest

from computedomains.kube import workqueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **kwargs: float) -> workqueue.WorkQueue:
    return workqueue.WorkQueue(clock=clock, rng=random.Random(7), **kwargs)


def drain(queue: workqueue.WorkQueue) -> list[str]:
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_a_key_added_twice_is_queued_once_and_order_is_kept() -> None:
    queue = make(Clock())
    for key in ("a", "b", "a", "c", "b"):
        queue.add(key)
    assert len(queue) == 3
    assert drain(queue) == ["a", "b", "c"]


def test_a_key_added_while_processed_is_not_handed_out_again_until_done() -> None:
    queue = make(Clock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    assert queue.get(timeout=0) is None  # a second worker would get nothing
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_a_delayed_key_becomes_ready_only_when_its_time_comes() -> None:
    clock = Clock()
    queue = make(clock)
    queue.add_after("a", 5)
    queue.add_after("a", 8)  # later: the earlier wins
    assert queue.get(timeout=0) is None
    assert queue.delayed() == 1
    clock.now += 5
    assert queue.get(timeout=0) == "a"


def test_an_earlier_delay_replaces_a_later_one_and_an_immediate_add_wins() -> None:
    clock = Clock()
    queue = make(clock)
    queue.add_after("a", 8)
    queue.add_after("a", 2)
    clock.now += 2
    assert drain(queue) == ["a"]
    queue.add_after("b", 8)
    queue.add("b")
    assert drain(queue) == ["b"]
    clock.now += 10
    assert drain(queue) == []  # the superseded delayed add does not fire again


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [(1, 0.1, 0.15), (2, 0.2, 0.3), (3, 0.4, 0.6), (8, 12.8, 19.2), (9, 25.6, 30.0), (40, 30, 30)],
)
def test_backoff_doubles_with_bounded_jitter_up_to_the_cap(
    failures: int, low: float, high: float
) -> None:
    for fraction in (0.0, 0.5, 0.999):

        def draw(value: float = fraction) -> float:
            return value

        delay = workqueue.backoff(failures, base=0.1, cap=30, jitter=0.5, draw=draw)
        assert low <= delay <= high


def test_rate_limited_adds_back_off_per_key_and_forget_resets() -> None:
    clock = Clock()
    queue = make(clock, base_delay=1, max_delay=100, jitter=0)
    assert queue.add_rate_limited("a") == 1
    assert queue.add_rate_limited("b") == 1
    clock.now += 1
    assert sorted(drain(queue)) == ["a", "b"]
    assert queue.add_rate_limited("a") == 2
    assert queue.add_rate_limited("a") == 4  # already waiting: the delay is still counted
    assert queue.failures("a") == 3
    queue.forget("a")
    assert queue.failures("a") == 0
    assert queue.add_rate_limited("a") == 1


def test_shutdown_wakes_a_blocked_worker() -> None:
    queue = workqueue.WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.shutdown()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert got == [None]
    queue.add("a")
    assert queue.get(timeout=0) is None


def test_a_blocked_worker_wakes_for_a_delayed_key() -> None:
    queue = workqueue.WorkQueue()
    queue.add_after("a", 0.05)
    assert queue.get(timeout=5) == "a"


def test_concurrent_workers_never_hold_the_same_key() -> None:
    queue = workqueue.WorkQueue()
    holding: set[str] = set()
    lock = threading.Lock()
    overlaps: list[str] = []
    handled = threading.Semaphore(0)

    def work() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in holding:
                    overlaps.append(key)
                holding.add(key)
            if handled.acquire(blocking=False):
                queue.add(key)  # re-added while held: must wait for done()
            with lock:
                holding.discard(key)
            queue.done(key)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for w in workers:
        w.start()
    for i in range(2000):
        queue.add(f"k{i % 5}")
        handled.release()
    queue.shutdown()
    for w in workers:
        w.join(timeout=10)
    assert overlaps == []
