"""Timestamps as the Kubernetes API writes them: RFC 3339 in UTC, ``2026-12-04T10:00:00Z``."""

from __future__ import annotations

import datetime


def stamp(moment: datetime.datetime | None = None, *, micro: bool = False) -> str:
    """``moment`` (now when None) in UTC, to the second.

    To the microsecond with ``micro`` (the API's MicroTime). A naive ``moment`` is UTC.
    """
    when = moment or datetime.datetime.now(datetime.UTC)
    when = when.replace(tzinfo=datetime.UTC) if when.tzinfo is None else when
    pattern = "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ"
    return when.astimezone(datetime.UTC).strftime(pattern)
