"""Logging flags: ``-v`` levels and ``--log-format text|json``, for components and hooks."""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from computedomains import logs, trace


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root, ours = logging.getLogger(), logging.getLogger(logs.OURS)
    saved = (list(root.handlers), root.level, ours.level)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    ours.setLevel(saved[2])
    for name in ("test.progress",):
        progress = logging.getLogger(name)
        progress.handlers.clear()
        progress.propagate = True


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    logs.add_flags(parser)
    return parser.parse_args(list(argv))


def test_flags_default_to_text_at_info_and_take_short_and_long_forms() -> None:
    assert (_args().log_format, _args().verbosity) == ("text", 0)
    assert _args("-v", "2").verbosity == 2 and _args("--verbosity=1").verbosity == 1
    assert _args("--log-format", "json").log_format == "json"
    with pytest.raises(SystemExit):
        _args("--log-format", "yaml")


def test_the_environment_twins_set_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPUTE_DOMAINS_LOG_FORMAT", "json")
    monkeypatch.setenv("COMPUTE_DOMAINS_VERBOSITY", "1")
    assert (_args().log_format, _args().verbosity) == ("json", 1)


@pytest.mark.parametrize(("verbosity", "ours", "library"), [(0, False, False), (1, True, False),
                                                            (2, True, True)])  # fmt: skip
def test_verbosity_opens_our_debug_lines_then_the_libraries(
    verbosity: int, ours: bool, library: bool
) -> None:
    logs.configure(_args("-v", str(verbosity)))
    assert logging.getLogger("computedomains.kube.client").isEnabledFor(logging.DEBUG) is ours
    assert logging.getLogger("urllib3.connectionpool").isEnabledFor(logging.DEBUG) is library
    assert logging.getLogger("urllib3").isEnabledFor(logging.INFO)


def test_json_lines_carry_time_level_logger_message_and_exception() -> None:
    record = logging.LogRecord("computedomains.x", logging.ERROR, __file__, 1, "a %s", ("b",), None)
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    body = json.loads(logs.JsonFormatter().format(record))
    assert body["level"] == "ERROR" and body["logger"] == "computedomains.x"
    assert body["message"] == "a b" and "ValueError: boom" in body["exception"]
    assert body["time"].endswith("Z")


def test_progress_lines_go_to_stdout_bare_in_text_and_as_objects_in_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    logs.configure(_args(), progress="test.progress")
    logging.getLogger("test.progress").info("preflight: Kubernetes 1.36.0: supported")
    assert out.getvalue() == "preflight: Kubernetes 1.36.0: supported\n"
    out.truncate(0)
    out.seek(0)
    logs.configure(_args("--log-format", "json"), progress="test.progress")
    logging.getLogger("test.progress").warning("preflight: WARNING: old")
    line = json.loads(out.getvalue())
    assert (line["level"], line["message"]) == ("WARNING", "preflight: WARNING: old")


def test_trace_lines_are_read_back_from_either_format() -> None:
    event = trace.Event(trace.Stage.IMEX_READY, "d1", "n1", 12.5, "imex-agent")
    text = f"2026-12-04 10:00:00,000 INFO {trace.MARK}{event.to_json()}"
    record = logging.LogRecord(trace.LOGGER, logging.INFO, __file__, 1, event.to_json(), (), None)
    as_json = logs.JsonFormatter().format(record)
    other = json.dumps({"logger": "computedomains.x", "message": "{}"})
    assert list(trace.parse([text, as_json, other, "{not json", "plain line"])) == [event, event]
