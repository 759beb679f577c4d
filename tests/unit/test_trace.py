"""The formation trace: lines written by one component, read back from a log."""

from __future__ import annotations

import logging

import pytest

from computedomains import logs, trace


def test_a_traced_stage_is_one_parseable_line_in_the_components_log_format(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracer = trace.Tracer("kubelet-plugin", wall=lambda: 1000.25)
    with caplog.at_level(logging.INFO, logger=trace.LOGGER):
        tracer.stage(trace.Stage.PREPARE_CALLED, domain="uid-1", node="n0", claim="c-1")
    formatter = logging.Formatter(logs.FORMAT)
    lines = [formatter.format(r) for r in caplog.records]
    assert len(lines) == 1
    assert list(trace.parse(lines)) == [
        trace.Event(trace.Stage.PREPARE_CALLED, "uid-1", "n0", 1000.25, "kubelet-plugin", "c-1")
    ]


def test_nothing_is_written_when_the_trace_logger_is_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=trace.LOGGER):
        trace.Tracer("imex-agent").stage(trace.Stage.IMEX_READY, domain="d", node="n")
    assert not caplog.records


def test_parse_skips_other_lines_and_broken_ones() -> None:
    good = trace.Event(trace.Stage.IMEX_READY, "d", "n1", 5.0, "imex-agent")
    lines = [
        "2026-12-01 10:00:00,000 INFO computedomains.imexagent.agent: started",
        f"2026-12-01 10:00:00,000 INFO {trace.LOGGER}: {{not json",
        f"2026-12-01 10:00:00,000 INFO {trace.LOGGER}: "
        '{"stage":"no-such-stage","domain":"d","node":"n","at":1,"component":"x"}',
        f"2026-12-01 10:00:00,000 INFO {trace.LOGGER}: {good.to_json()}",
    ]
    assert list(trace.parse(lines)) == [good]


def _event(stage: trace.Stage, node: str, at: float, domain: str = "d") -> trace.Event:
    return trace.Event(stage, domain, node, at, "test")


def test_all_reached_is_when_the_last_node_first_reached_each_stage() -> None:
    S = trace.Stage
    events = [
        _event(S.PREPARE_CALLED, "a", 10.2),
        _event(S.PREPARE_CALLED, "b", 10.5),
        _event(S.PREPARE_CALLED, "b", 11.0),  # a retried call: the first one counts
        _event(S.IMEX_STARTED, "a", 10.9),
        _event(S.IMEX_STARTED, "b", 11.4),
        _event(S.IMEX_READY, "a", 11.6),  # b never got there: left out
        _event(S.PREPARE_CALLED, "c", 99.0, domain="other"),
    ]
    reached = trace.all_reached(events, domain="d", nodes=2, since=10.0)
    assert reached == pytest.approx({S.PREPARE_CALLED: 0.5, S.IMEX_STARTED: 1.4})
