"""The one writer of API timestamps."""

from __future__ import annotations

import datetime

from computedomains import rfc3339


def test_an_aware_moment_is_written_in_utc_to_the_second() -> None:
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    moment = datetime.datetime(2026, 12, 4, 12, 0, 5, 123456, tzinfo=plus_two)
    assert rfc3339.stamp(moment) == "2026-12-04T10:00:05Z"


def test_micro_keeps_the_microseconds_as_micro_time_does() -> None:
    moment = datetime.datetime(2026, 12, 4, 10, 0, 5, 42, tzinfo=datetime.UTC)
    assert rfc3339.stamp(moment, micro=True) == "2026-12-04T10:00:05.000042Z"


def test_a_naive_moment_is_taken_as_utc() -> None:
    assert rfc3339.stamp(datetime.datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


def test_now_is_parsable_and_current() -> None:
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    written = datetime.datetime.strptime(rfc3339.stamp(), "%Y-%m-%dT%H:%M:%SZ")
    assert written.replace(tzinfo=datetime.UTC) >= before
