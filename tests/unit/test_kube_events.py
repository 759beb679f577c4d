"""Event correlation: the pure rules (series, combined messages, spam filter) and their state."""

from __future__ import annotations

import threading

import pytest

from computedomains.kube import events
from computedomains.kube.events import Action, Bucket, EventType, Policy, Series, Similar

POLICY = Policy()
POD = events.ObjectRef("Pod", "stuck", "ns", "uid-1")
OTHER_POD = events.ObjectRef("Pod", "other", "ns", "uid-2")


def occurrence(
    message: str = "prepare failed", *, ref: events.ObjectRef = POD, reason: str = "Failed"
) -> events.Occurrence:
    return events.Occurrence(ref, EventType.WARNING, reason, message)


@pytest.mark.parametrize(
    ("bucket", "now", "expected", "allowed"),
    [
        (None, 0, Bucket(24, 0), True),  # a new object starts with the whole burst
        (Bucket(1, 0), 0, Bucket(0, 0), True),
        (Bucket(0, 0), 299, Bucket(299 / 300, 299), False),  # not quite one refill yet
        (Bucket(0, 0), 300, Bucket(0, 300), True),
        (Bucket(0.5, 0), 150, Bucket(0, 150), True),  # partial tokens add up
        (Bucket(24, 0), 3600, Bucket(24, 3600), True),  # refill is capped at the burst
        (Bucket(0, 100), 50, Bucket(0, 50), False),  # clock stepped back: no refill
    ],
)
def test_spend(bucket: Bucket | None, now: float, expected: Bucket, allowed: bool) -> None:
    assert events.spend(bucket, now=now, policy=POLICY) == (expected, allowed)


EARLIER = Series(name="old", count=3, first=0, last=100, message="m", written=True)


@pytest.mark.parametrize(
    ("series", "now", "expected"),
    [
        (None, 5, Series(name="new", count=1, first=5, last=5, message="m")),
        (EARLIER, 700, Series("old", 4, first=0, last=700, message="m", written=True)),
        # The window counts from the last occurrence, not the first.
        (EARLIER, 700.5, Series(name="new", count=1, first=700.5, last=700.5, message="m")),
    ],
)
def test_observe(series: Series | None, now: float, expected: Series) -> None:
    assert events.observe(series, name="new", message="m", now=now, policy=POLICY) == expected


NINE = frozenset(f"m{i}" for i in range(9))
TEN = NINE | {"m9"}


@pytest.mark.parametrize(
    ("record", "message", "now", "expected", "combined"),
    [
        (None, "m0", 0, Similar(frozenset({"m0"}), 0), False),
        (Similar(NINE, 0), "m0", 10, Similar(NINE, 10), False),  # a repeat adds nothing
        (Similar(NINE, 0), "m9", 10, Similar(TEN, 10), True),  # the tenth message combines
        (Similar(TEN, 0), "m10", 10, Similar(TEN, 10), True),  # the record stays bounded
        (Similar(TEN, 0), "m0", 10, Similar(TEN, 10), True),  # and so do earlier messages
        (Similar(TEN, 0), "m10", 601, Similar(frozenset({"m10"}), 601), False),  # quiet spell
    ],
)
def test_aggregate(
    record: Similar | None, message: str, now: float, expected: Similar, combined: bool
) -> None:
    assert events.aggregate(record, message, now=now, policy=POLICY) == (expected, combined)


FRESH = Series(name="n", count=1, first=0, last=0, message="m")


@pytest.mark.parametrize(
    ("series", "allowed", "expected"),
    [
        (FRESH, True, Action.CREATE),
        (FRESH, False, Action.DROP),
        (Series("n", 2, 0, 0, "m", written=True), True, Action.PATCH),
        (Series("n", 2, 0, 0, "m", written=True, writing=True), True, Action.DEFER),
        (Series("n", 2, 0, 0, "m", written=True, writing=True), False, Action.DROP),
        # A create the spam filter dropped is still due: the next allowed write creates.
        (Series("n", 2, 0, 0, "m"), True, Action.CREATE),
    ],
)
def test_decide(series: Series, allowed: bool, expected: Action) -> None:
    assert events.decide(series, allowed=allowed) is expected


Step = tuple[float, events.Occurrence]
Expected = tuple[Action, str, int, str]
"""(action, object name, count, message written)."""


def run(steps: list[Step], policy: Policy = POLICY) -> list[Expected]:
    """Correlate ``steps`` in order, each written (and finished) before the next."""
    correlator = events.Correlator(policy)
    seen = []
    for number, (now, item) in enumerate(steps):
        decision = correlator.correlate(item, now=now, name=f"e{number}")
        seen.append((decision.action, decision.series.name, decision.series.count,
                     decision.series.message))  # fmt: skip
        if decision.action in events.WRITES:
            assert correlator.written(decision) is None
    return seen


COMBINED = events.COMBINED_PREFIX
SEQUENCES: dict[str, tuple[list[Step], list[Expected]]] = {
    "a retried failure is one object": (
        [(t, occurrence()) for t in (0, 10, 30)],
        [
            (Action.CREATE, "e0", 1, "prepare failed"),
            (Action.PATCH, "e0", 2, "prepare failed"),
            (Action.PATCH, "e0", 3, "prepare failed"),
        ],
    ),
    "a new message is a new object": (
        [(0, occurrence("a")), (1, occurrence("b")), (2, occurrence("a"))],
        [
            (Action.CREATE, "e0", 1, "a"),
            (Action.CREATE, "e1", 1, "b"),
            (Action.PATCH, "e0", 2, "a"),
        ],
    ),
    "other objects, reasons and types are other series": (
        [
            (0, occurrence()),
            (1, occurrence(ref=OTHER_POD)),
            (2, occurrence(reason="Other")),
            (3, events.Occurrence(POD, EventType.NORMAL, "Failed", "prepare failed")),
        ],
        [(Action.CREATE, f"e{i}", 1, "prepare failed") for i in range(4)],
    ),
    "a gap longer than the window starts a new object": (
        [(0, occurrence()), (600, occurrence()), (1200.5, occurrence())],
        [
            (Action.CREATE, "e0", 1, "prepare failed"),
            (Action.PATCH, "e0", 2, "prepare failed"),
            (Action.CREATE, "e2", 1, "prepare failed"),
        ],
    ),
    "ten messages of one reason combine": (
        [(i, occurrence(f"m{i}")) for i in range(12)],
        [(Action.CREATE, f"e{i}", 1, f"m{i}") for i in range(9)]
        + [
            (Action.CREATE, "e9", 1, COMBINED + "m9"),
            (Action.PATCH, "e9", 2, COMBINED + "m10"),
            (Action.PATCH, "e9", 3, COMBINED + "m11"),
        ],
    ),
    "a flood is throttled and its count caught up later": (
        [(0.0, occurrence()) for _ in range(27)] + [(300.0, occurrence())],
        [(Action.CREATE, "e0", 1, "prepare failed")]
        + [(Action.PATCH, "e0", n, "prepare failed") for n in range(2, 26)]
        + [(Action.DROP, "e0", 26, "prepare failed"), (Action.DROP, "e0", 27, "prepare failed")]
        + [(Action.PATCH, "e0", 28, "prepare failed")],
    ),
    "the budget is per object, shared by its series": (
        [(0.0, occurrence(f"m{i % 2}")) for i in range(26)] + [(0.0, occurrence(ref=OTHER_POD))],
        [(Action.CREATE, "e0", 1, "m0"), (Action.CREATE, "e1", 1, "m1")]
        + [(Action.PATCH, f"e{i % 2}", i // 2 + 1, f"m{i % 2}") for i in range(2, 25)]
        + [(Action.DROP, "e1", 13, "m1"), (Action.CREATE, "e26", 1, "prepare failed")],
    ),
}


@pytest.mark.parametrize(("steps", "expected"), SEQUENCES.values(), ids=SEQUENCES.keys())
def test_correlator_sequences(steps: list[Step], expected: list[Expected]) -> None:
    assert run(steps) == expected


def test_a_dropped_first_occurrence_is_created_with_its_count() -> None:
    flood = [(0.0, occurrence(f"m{i % 2}")) for i in range(25)]
    seen = run([*flood, (0, occurrence("late")), (300, occurrence("late"))])
    assert seen[-2:] == [(Action.DROP, "e25", 1, "late"), (Action.CREATE, "e25", 2, "late")]


def test_the_least_recently_used_series_is_forgotten() -> None:
    seen = run([(0, occurrence("a")), (0, occurrence("b")), (0, occurrence("a"))],
               Policy(cache_size=1))  # fmt: skip
    assert [action for action, *_ in seen] == [Action.CREATE] * 3


def test_an_occurrence_during_a_write_is_written_by_the_writer() -> None:
    correlator = events.Correlator(POLICY)
    first = correlator.correlate(occurrence(), now=0, name="e0")
    assert first.action is Action.CREATE
    assert correlator.correlate(occurrence(), now=1, name="e1").action is Action.DEFER
    assert correlator.correlate(occurrence(), now=2, name="e2").action is Action.DEFER
    follow_up = correlator.written(first)
    assert follow_up is not None
    assert (follow_up.action, follow_up.series.name, follow_up.series.count) == (
        Action.PATCH, "e0", 3,
    )  # fmt: skip
    assert correlator.written(follow_up) is None
    assert correlator.correlate(occurrence(), now=3, name="e3").action is Action.PATCH


def test_an_abandoned_write_leaves_the_next_occurrence_to_write() -> None:
    correlator = events.Correlator(POLICY)
    first = correlator.correlate(occurrence(), now=0, name="e0")
    assert correlator.correlate(occurrence(), now=1, name="e1").action is Action.DEFER
    correlator.abandon(first)
    assert correlator.correlate(occurrence(), now=2, name="e2").action is Action.PATCH


def test_a_writer_of_an_expired_series_stops() -> None:
    correlator = events.Correlator(POLICY)
    first = correlator.correlate(occurrence(), now=0, name="e0")
    second = correlator.correlate(occurrence(), now=1000, name="e1")
    assert (second.action, second.series.name) == (Action.CREATE, "e1")  # its own writer
    assert correlator.written(first) is None  # the old object gets no write of the new series
    assert correlator.written(second) is None


def test_concurrent_emitters_write_one_object_in_count_order() -> None:
    correlator = events.Correlator(Policy(burst=10_000))
    written: list[tuple[Action, str, int]] = []

    def emitter(thread: int) -> None:
        for i in range(200):
            decision = correlator.correlate(occurrence(), now=0, name=f"t{thread}-{i}")
            next_write: events.Decision | None = decision
            while next_write is not None and next_write.action in events.WRITES:
                written.append((next_write.action, next_write.series.name,
                                next_write.series.count))  # fmt: skip
                next_write = correlator.written(next_write)

    threads = [threading.Thread(target=emitter, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [action for action, *_ in written].count(Action.CREATE) == 1
    assert len({name for _, name, _ in written}) == 1
    counts = [count for *_, count in written]
    assert counts == sorted(set(counts)), "writes of one series overtook each other"
    assert counts[-1] == 8 * 200, "the last write must carry every occurrence"
