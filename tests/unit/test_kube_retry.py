"""The API client's retries (pure rules) and request budget."""

from __future__ import annotations

import email.utils

import pytest

from computedomains.kube import ratelimit, retry

POLICY = retry.Policy(attempts=3, backoff_initial=0.5, backoff_cap=1.5, retry_after_cap=10)


@pytest.mark.parametrize(
    ("method", "status", "header", "expected"),
    [
        ("POST", 429, "2", 2.0),  # the server did not act: any request, after its wait
        ("PATCH", 429, None, 0.5),  # no wait named: the back-off
        ("PUT", 429, "600", 10.0),  # a long wait is capped
        ("POST", 503, "1", 1.0),  # a 5xx that names a wait did not act either
        ("GET", 500, None, 0.5),  # a read is sent again after any 5xx
        ("POST", 500, None, None),  # a write that may have acted is not
        ("DELETE", 503, None, None),
        ("GET", 404, None, None),  # an answer, not a failure
        ("PUT", 409, "1", None),
    ],
)
def test_what_is_sent_again_after_an_answer(
    method: str, status: int, header: str | None, expected: float | None
) -> None:
    assert retry.after_answer(POLICY, method, status, header, 0) == expected


def test_tries_stop_at_the_policys_count_and_waits_double_up_to_the_cap() -> None:
    assert [retry.after_answer(POLICY, "GET", 500, None, n) for n in range(3)] == [0.5, 1.0, None]
    assert [retry.Policy(backoff_initial=0.5, backoff_cap=1.5).backoff(n) for n in range(4)] == [
        0.5, 1.0, 1.5, 1.5,
    ]  # fmt: skip


def test_after_no_answer_only_reads_or_requests_never_sent_go_again() -> None:
    assert retry.after_failure(POLICY, "POST", sent=False, attempt=0) == 0.5
    assert retry.after_failure(POLICY, "GET", sent=True, attempt=1) == 1.0
    assert retry.after_failure(POLICY, "POST", sent=True, attempt=0) is None
    assert retry.after_failure(POLICY, "GET", sent=False, attempt=2) is None


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry.retry_after("3") == 3.0
    assert retry.retry_after(" ") is None and retry.retry_after(None) is None
    assert retry.retry_after("soon") is None and retry.retry_after("²") is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry.retry_after(date, now=1_000_000) == pytest.approx(10.0)
    assert retry.retry_after(date, now=1_000_020) == 0.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_bucket_lets_a_burst_through_then_paces_at_qps() -> None:
    clock = _Clock()
    bucket = ratelimit.TokenBucket(5, 3, clock=lambda: clock.now, sleep=clock.sleep)
    waits = [bucket.take() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:] == pytest.approx([0.2, 0.2])
    clock.now += 10  # idle: the bucket fills up to the burst again, no further
    assert [bucket.take() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.2])


def test_a_bucket_without_qps_never_waits() -> None:
    clock = _Clock()
    bucket = ratelimit.TokenBucket(0, 1, clock=lambda: clock.now, sleep=clock.sleep)
    assert [bucket.take() for _ in range(100)] == [0.0] * 100 and clock.slept == []


def test_a_backoff_is_stretched_by_the_draw_up_to_the_jitter() -> None:
    policy = retry.Policy(backoff_initial=1.0, backoff_cap=8.0, jitter=0.5)
    assert [policy.backoff(2, d) for d in (0.0, 0.5, 0.999)] == [4.0, 5.0, 4.0 * 1.4995]
    assert retry.after_failure(policy, "GET", sent=True, attempt=0, draw=1.0) == 1.5
    assert retry.after_answer(policy, "GET", 500, None, 1, draw=0.5) == 2.5


def test_a_retry_after_is_spread_above_what_was_asked_up_to_the_jitter_and_the_cap() -> None:
    # 2,000 node clients told "429 Retry-After: 5" together must not come back together.
    policy = retry.Policy(jitter=0.5, retry_after_cap=30)
    waits = {retry.after_answer(policy, "PATCH", 429, "5", 0, draw=n / 2000) or 0.0
             for n in range(2000)}  # fmt: skip
    assert len(waits) == 2000  # no two of them at once
    assert min(waits) == 5.0 and max(waits) < 7.5  # never sooner than asked, at most half again
    assert retry.after_answer(policy, "GET", 503, "2", 0, draw=0.9) == pytest.approx(2.9)
    assert retry.after_answer(policy, "POST", 429, "25", 0, draw=0.9) == 30.0  # still capped
