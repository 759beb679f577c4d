"""Polling with deadlines."""

from __future__ import annotations

import pytest

from computedomains import waiting


def test_returns_the_first_truthy_value() -> None:
    values = iter([None, 0, "ready"])
    assert waiting.until("a value", lambda: next(values), timeout=5, interval=0) == "ready"


def test_timeout_names_what_was_awaited_and_the_last_error() -> None:
    def failing() -> None:
        raise ConnectionError("refused")

    with pytest.raises(
        waiting.WaitTimeout, match=r"waiting for the server \(last error: refused\)"
    ):
        waiting.until(
            "the server", failing, timeout=0.05, interval=0.01, retry_on=(ConnectionError,)
        )


def test_abort_stops_waiting_at_once() -> None:
    def abort() -> None:
        raise RuntimeError("etcd exited with code 1")

    with pytest.raises(RuntimeError, match="etcd exited"):
        waiting.until("never", lambda: None, timeout=60, abort=abort)


def test_unexpected_errors_propagate() -> None:
    def broken() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        waiting.until("x", broken, timeout=5, retry_on=(ConnectionError,))
