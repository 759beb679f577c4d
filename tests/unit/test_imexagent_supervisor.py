"""Supervision of nvidia-imex: backoff, readiness checks, error text, real child processes."""

from __future__ import annotations

import math
import pathlib
import socket
import stat
import threading

import prometheus_client
import pytest

from computedomains import waiting
from computedomains.imexagent import decide, metrics, process, render, supervisor
from computedomains.imexagent.decide import Health


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (60, 30.0)],
)
def test_backoff_doubles_up_to_a_cap(failures: int, delay: float) -> None:
    assert supervisor.backoff(failures) == delay


@pytest.mark.parametrize(
    ("returncode", "stdout", "ready"),
    [(0, "READY\n", True), (0, "READY", True), (1, "READY\n", False), (0, "UNAVAILABLE\n", False),
     (0, "READY\nextra\n", False), (0, "", False)],
)  # fmt: skip
def test_ctl_ready_needs_exit_zero_and_the_word(returncode: int, stdout: str, ready: bool) -> None:
    assert supervisor.ctl_ready(returncode, stdout) is ready


def assess(**overrides: object) -> supervisor.Assessment:
    args: dict[str, object] = {
        "ready": False, "ctl_text": "UNAVAILABLE", "previous": Health.STARTING, "misses": 0,
        "ever_ready": False, "failure": "", "elapsed": 1.0, "start_timeout": 60.0,
    }  # fmt: skip
    args.update(overrides)
    return supervisor.assess(**args)


@pytest.mark.parametrize(
    ("overrides", "health", "text"),
    [
        pytest.param({"ready": True}, Health.READY, "READY", id="ready"),
        pytest.param({}, Health.STARTING, "waiting for nvidia-imex", id="starting"),
        pytest.param({"elapsed": 61.0}, Health.FAILED, "did not answer READY within 60s",
                     id="start timeout"),
        pytest.param({"previous": Health.READY}, Health.READY, "READY", id="one miss tolerated"),
        pytest.param({"previous": Health.READY, "misses": 2, "ever_ready": True}, Health.FAILED,
                     "stopped answering READY", id="three misses"),
        pytest.param({"failure": "exited with code 1: bind"}, Health.FAILED,
                     "exited with code 1: bind", id="last crash stays visible"),
        pytest.param({"failure": "boom", "ready": True}, Health.READY, "READY",
                     id="READY clears a crash"),
    ],
)  # fmt: skip
def test_assess(overrides: dict[str, object], health: Health, text: str) -> None:
    result = assess(**overrides)
    assert result.health == health
    assert text in result.text


LOG = "[Nov 30 2026 07:30:00] [{level}] [tid 42] {text}"


@pytest.mark.parametrize(
    ("lines", "text"),
    [
        pytest.param([], "", id="silent"),
        pytest.param(["plain output", ""], "plain output", id="last line"),
        pytest.param(
            [LOG.format(level="ERROR", text="Failed to bind to 127.0.0.9:50000: Address in use"),
             LOG.format(level="INFO", text="shutting down")],
            "Failed to bind to 127.0.0.9:50000: Address in use", id="last error, prefix cut",
        ),
    ],
)  # fmt: skip
def test_error_text(lines: list[str], text: str) -> None:
    assert process.error_text(lines) == text


def test_exit_text_names_the_signal_or_code() -> None:
    assert process.exit_text(-9, []) == "nvidia-imex was killed by SIGKILL"
    line = LOG.format(level="ERROR", text="boom")
    assert process.exit_text(1, [line]) == "nvidia-imex exited with code 1: boom"


# -- the supervisor with real children ---------------------------------------------------


def script(path: pathlib.Path, body: str) -> pathlib.Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


MEMBERSHIP = decide.Membership(
    "11111111-aaaa", 0, render.host_entries("11111111-aaaa", {0: "127.0.0.9"}, 2)
)


def make(
    tmp_path: pathlib.Path,
    imex_body: str,
    ctl_body: str = "echo READY\n",
    command_port: tuple[str, int] | None = None,
) -> tuple[supervisor.Supervisor, threading.Event, metrics.AgentMetrics]:
    exited = threading.Event()
    stats = metrics.AgentMetrics(prometheus_client.CollectorRegistry())
    sup = supervisor.Supervisor(
        binary=script(tmp_path / "nvidia-imex", imex_body),
        ctl=script(tmp_path / "nvidia-imex-ctl", ctl_body),
        config_file=tmp_path / "imexd.cfg",
        start_timeout=30,
        stop_timeout=0.5,
        stats=stats,
        on_exit=exited.set,
        command_port=command_port,
    )
    return sup, exited, stats


def test_no_ctl_runs_before_the_command_port_accepts(tmp_path: pathlib.Path) -> None:
    runs = tmp_path / "ctl-runs"
    with socket.socket() as port:  # bound, not listening: a connect is refused
        port.bind(("127.0.0.1", 0))
        address = port.getsockname()
        sup, _, _ = make(tmp_path, "exec sleep 30\n", f"echo run >> {runs}\necho READY\n",
                         command_port=address)  # fmt: skip
        sup.start(MEMBERSHIP, now=0.0)
        sup.check(now=1.0)
        seen = sup.observed()
        assert seen.health == Health.STARTING and not runs.exists()
        assert "command port" in seen.text and f":{address[1]}" in seen.text
        assert sup.next_check() == pytest.approx(1.0 + supervisor.PROBE_INTERVAL)
        port.listen()
        sup.check(now=2.0)
        assert sup.observed().health == Health.READY
        assert runs.read_text() == "run\n"
        assert sup.next_check() == pytest.approx(2.0 + supervisor.CHECK_READY)
        sup.stop()


def test_an_answer_short_of_ready_at_the_ports_opening_is_checked_again_soon(
    tmp_path: pathlib.Path,
) -> None:
    # IMEX answers on its command port a moment before it is READY: the check after that
    # answer counts from the port's opening, not from the start a whole start-up ago.
    asked = tmp_path / "asked"
    ctl = f"if [ -e {asked} ]; then echo READY; else touch {asked}; echo INITIALIZING; exit 1; fi\n"
    with socket.socket() as port:
        port.bind(("127.0.0.1", 0))
        port.listen()
        sup, _, _ = make(tmp_path, "exec sleep 30\n", ctl, command_port=port.getsockname())
        sup.start(MEMBERSHIP, now=0.0)
        sup.check(now=4.0)
        assert sup.observed().health == Health.STARTING
        assert sup.next_check() == pytest.approx(4.0 + supervisor.CHECK_FIRST)
        sup.check(now=4.0 + supervisor.CHECK_FIRST)
        assert sup.observed().health == Health.READY
        sup.stop()
        asked.unlink()
        sup.start(MEMBERSHIP, now=10.0)  # a new start looks for the port's opening again
        sup.check(now=13.0)
        assert sup.next_check() == pytest.approx(13.0 + supervisor.CHECK_FIRST)
        sup.stop()


def test_past_the_start_timeout_the_checks_keep_their_pace(tmp_path: pathlib.Path) -> None:
    # ctl runs then without a look at the port: that is no sign of the port opening.
    with socket.socket() as port:
        port.bind(("127.0.0.1", 0))
        sup, _, _ = make(tmp_path, "exec sleep 30\n", "echo INITIALIZING\nexit 1\n",
                         command_port=port.getsockname())  # fmt: skip
        sup.start(MEMBERSHIP, now=0.0)
        sup.check(now=31.0)  # the start timeout is 30 s
        assert sup.next_check() == pytest.approx(31.0 + supervisor.CHECK_STARTING_MAX)
        sup.stop()


def test_crash_is_reported_with_its_error_and_restarted_after_backoff(
    tmp_path: pathlib.Path,
) -> None:
    sup, exited, stats = make(tmp_path, "echo '[x] [ERROR] [tid 1] it broke' >&2\nexit 3\n")
    sup.start(MEMBERSHIP, now=0.0)
    assert exited.wait(10), "the child's exit was not signalled"
    sup.reap(now=1.0)
    assert sup.running() is None
    seen = sup.observed()
    assert seen.health == Health.FAILED
    assert seen.text == "nvidia-imex exited with code 3: it broke"
    assert sup.gates().start_not_before == 2.0  # 1 s after the first crash
    sup.start(MEMBERSHIP, now=2.0)
    assert sup.observed().health == Health.FAILED  # until it answers READY
    assert stats.restarts.labels("crash")._value.get() == 1
    sup.stop()


def test_ready_after_a_check_then_reload_and_stop(tmp_path: pathlib.Path) -> None:
    sup, _, stats = make(tmp_path, "trap 'exit 0' TERM\nwhile :; do sleep 0.1; done\n")
    sup.start(MEMBERSHIP, now=0.0)
    assert sup.observed().health == Health.STARTING
    sup.check(now=0.0)  # not due yet
    assert sup.observed().health == Health.STARTING
    sup.check(now=1.0)
    assert sup.observed() == decide.Observed(Health.READY, MEMBERSHIP.domain_uid, "READY")
    assert sup.gates().reload_not_before == supervisor.RELOAD_SPACING
    sup.reload(MEMBERSHIP, now=10.0)
    assert stats.reloads._value.get() == 1
    assert sup.gates().reload_not_before == 10.0 + supervisor.RELOAD_SPACING
    sup.stop()
    assert sup.running() is None
    assert sup.observed().health == Health.NOT_RUNNING
    assert sup.next_check() == math.inf


def test_stop_escalates_to_sigkill(tmp_path: pathlib.Path) -> None:
    marker = tmp_path / "trapped"
    sup, exited, stats = make(
        tmp_path, f"trap '' TERM\ntouch {marker}\nwhile :; do sleep 0.1; done\n"
    )
    sup.start(MEMBERSHIP, now=0.0)
    # The shell must ignore SIGTERM before it comes, or it would simply die of it.
    waiting.until("the child to ignore SIGTERM", marker.exists, timeout=10)
    sup.stop()
    assert exited.is_set()
    assert stats.kills._value.get() == 1


def test_a_missing_binary_is_a_failure_not_an_exception(tmp_path: pathlib.Path) -> None:
    sup, _, _ = make(tmp_path, "exit 0\n")
    (tmp_path / "nvidia-imex").unlink()
    sup.start(MEMBERSHIP, now=0.0)
    assert sup.running() is None
    assert sup.observed().health == Health.FAILED
    assert "cannot run" in sup.observed().text
    assert sup.gates().start_not_before == 1.0


def test_files_that_cannot_be_written_fail_the_start_for_that_domain(
    tmp_path: pathlib.Path,
) -> None:
    sup, _, _ = make(tmp_path, "exit 0\n")
    sup.start_failed(MEMBERSHIP, "cannot write the IMEX files: read-only", now=5.0)
    assert sup.observed() == decide.Observed(
        Health.FAILED, MEMBERSHIP.domain_uid, "cannot write the IMEX files: read-only"
    )
    assert sup.gates().start_not_before == 6.0


@pytest.mark.parametrize(
    ("steady", "elapsed", "expected"),
    [
        (True, 0.3, supervisor.CHECK_READY),
        (False, 0.0, supervisor.CHECK_FIRST),  # at once after a start: the shortest step
        (False, 0.6, 0.3),  # half of what IMEX has run so far
        (False, 30.0, supervisor.CHECK_STARTING_MAX),  # a slow start-up: once a second
    ],
)
def test_checks_come_fast_while_imex_starts_and_rarely_once_it_is_ready(
    steady: bool, elapsed: float, expected: float
) -> None:
    assert supervisor.check_interval(steady=steady, elapsed=elapsed) == pytest.approx(expected)
