"""Supervise ``nvidia-imex``: start, reload by SIGUSR1, stop, restart after a crash, check.

The supervisor acts only when the agent's main loop tells it to, and from that thread alone.
A crash is noticed through the child's exit callback (nothing polls for it) and delays the
next start by a capped exponential backoff. Health comes from ``nvidia-imex-ctl -q``, asked
often while IMEX starts and now and then once it is READY; while a starting IMEX does not
accept connections on its command port yet, a connect attempt answers instead of a ctl run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib
import signal
import socket
import subprocess
from collections.abc import Callable

from computedomains.imexagent import decide, metrics, process

log = logging.getLogger(__name__)
RELOAD_SPACING = 6.0
"""Seconds between SIGUSR1s (and after a start): IMEX handles one per 5 s, ignores the rest."""
BACKOFF_INITIAL = 1.0
BACKOFF_CAP = 30.0
STABLE_RUN = 60.0
"""A crash after a run this long starts the backoff over."""
CHECK_FIRST = 0.1
"""Seconds after a start (or reload) before the first ``nvidia-imex-ctl -q``."""
CHECK_STARTING_MAX = 1.0
CHECK_READY = 10.0
CHECK_TIMEOUT = 10.0
PROBE_INTERVAL = 0.05
"""Seconds between looks at IMEX's command port while a starting IMEX does not accept there
yet: a connect attempt costs microseconds, where ``nvidia-imex-ctl`` is a process start."""
PROBE_TIMEOUT = 0.5
READY_MISSES = 3
"""Failed checks in a row before a READY IMEX counts as failed (one slow answer is not)."""


def backoff(failures: int) -> float:
    """Seconds before the next start after ``failures`` crashes in a row."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_CAP, BACKOFF_INITIAL * 2.0 ** min(failures - 1, 30))


def check_interval(*, steady: bool, elapsed: float) -> float:
    """Seconds until the next ``nvidia-imex-ctl -q``: rare once READY.

    While IMEX starts, about half of ``elapsed``, the time since its command port opened (or,
    without a port to look at, since the start): READY is seen soon after it happens (prepare
    waits for it), and a slow start-up costs a few checks, not ten a second. Counting from the
    port's opening matters: IMEX answers there a moment before it is READY, and a check that
    lands in that moment must not put the next one up to a second away.
    """
    if steady:
        return CHECK_READY
    return min(CHECK_STARTING_MAX, max(CHECK_FIRST, elapsed / 2))


def accepts(address: tuple[str, int]) -> bool:
    """True when something accepts TCP connections at ``address`` (closed again at once).

    ``nvidia-imex-ctl`` asks IMEX over this port, so it cannot say READY before.
    """
    try:
        with socket.create_connection(address, timeout=PROBE_TIMEOUT):
            return True
    except OSError:
        return False


def ctl_ready(returncode: int, stdout: str) -> bool:
    """``nvidia-imex-ctl -q`` says READY: exit 0 and the single word READY."""
    return returncode == 0 and stdout.strip() == "READY"


@dataclasses.dataclass(frozen=True)
class Assessment:
    """Health after one check, and the count of failed checks in a row."""

    health: decide.Health
    text: str
    misses: int


def assess(
    *,
    ready: bool,
    ctl_text: str,
    previous: decide.Health,
    misses: int,
    ever_ready: bool,
    failure: str,
    elapsed: float,
    start_timeout: float,
) -> Assessment:
    """The health of a running IMEX after a check (``failure``: the last crash's text)."""
    if ready:
        return Assessment(decide.Health.READY, "READY", 0)
    misses += 1
    if previous == decide.Health.READY and misses < READY_MISSES:
        return Assessment(decide.Health.READY, "READY", misses)
    if failure:
        return Assessment(decide.Health.FAILED, failure, misses)
    if ever_ready:
        text = f"nvidia-imex stopped answering READY: {ctl_text}"
        return Assessment(decide.Health.FAILED, text, misses)
    if elapsed >= start_timeout:
        text = f"nvidia-imex did not answer READY within {start_timeout:g}s: {ctl_text}"
        return Assessment(decide.Health.FAILED, text, misses)
    text = f"waiting for nvidia-imex to answer READY ({ctl_text})"
    return Assessment(decide.Health.STARTING, text, misses)


class Supervisor:
    """Owns the node's ``nvidia-imex`` process."""

    def __init__(
        self,
        *,
        binary: pathlib.Path,
        ctl: pathlib.Path,
        config_file: pathlib.Path,
        start_timeout: float,
        stop_timeout: float,
        stats: metrics.AgentMetrics,
        on_exit: Callable[[], None],
        command_port: tuple[str, int] | None = None,
    ) -> None:
        """Supervise IMEX run from ``binary``, asked through ``ctl``.

        ``command_port`` is IMEX's command service as its config sets it, looked at before
        each ``nvidia-imex-ctl`` while IMEX starts (None: always ask ctl).
        """
        self._command_port = command_port
        self._argv = (str(binary), "-c", str(config_file))
        self._check_argv = (str(ctl), "-q", "-c", str(config_file))
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._stats = stats
        self._on_exit = on_exit
        self._process: process.ImexProcess | None = None
        self._running: decide.Running | None = None
        self._domain = ""
        self._health = decide.Health.NOT_RUNNING
        self._text = ""
        self._failure = ""
        self._failures = 0
        self._crashed = False
        self._start_not_before = -math.inf
        self._reload_not_before = -math.inf
        self._started_at = 0.0
        self._port_open_at: float | None = None
        """When the command port first accepted after the start (None: not yet)."""
        self._next_check = math.inf
        self._misses = 0
        self._ever_ready = False

    # -- state --------------------------------------------------------------------------

    def running(self) -> decide.Running | None:
        """What the running IMEX was given; None when none runs."""
        return self._running

    def gates(self) -> decide.Gates:
        """When a start or a reload may happen next."""
        return decide.Gates(self._start_not_before, self._reload_not_before)

    def observed(self) -> decide.Observed:
        """Health, domain of the current (or last) process, IMEX's words."""
        return decide.Observed(self._health, self._domain, self._text)

    def next_check(self) -> float:
        """When :meth:`check` has work next."""
        return self._next_check if self._process is not None else math.inf

    # -- actions ------------------------------------------------------------------------

    def start(self, membership: decide.Membership, *, now: float, cause: str = "") -> None:
        """Start IMEX for ``membership`` (its files are written); ``cause`` names a restart."""
        assert self._process is None, "start while IMEX runs"
        if membership.domain_uid != self._domain:
            self._failure, self._failures = "", 0  # the old domain's crashes are not this one's
        if self._crashed or cause:
            self._stats.restarted("crash" if self._crashed else cause)
        self._crashed = False
        self._domain = membership.domain_uid
        self._started_at = now
        self._port_open_at = None
        try:
            self._process = process.ImexProcess(self._argv, on_exit=self._on_exit)
        except OSError as exc:
            self._crash(f"cannot run {self._argv[0]}: {exc}", ran_for=0.0, now=now)
            return
        log.info("started nvidia-imex (pid %d) for domain %s, slot %d",
                 self._process.pid, membership.domain_uid, membership.slot)  # fmt: skip
        self._running = decide.Running(membership.domain_uid, membership.hosts)
        self._health = decide.Health.FAILED if self._failure else decide.Health.STARTING
        self._text = self._failure or "nvidia-imex started; waiting for READY"
        self._misses, self._ever_ready = 0, False
        self._reload_not_before = now + RELOAD_SPACING
        self._next_check = now + CHECK_FIRST

    def start_failed(self, membership: decide.Membership, text: str, *, now: float) -> None:
        """Record that IMEX could not be started for ``membership``; retried like a crash.

        For failures before the process exists, such as IMEX files that cannot be written.
        """
        assert self._process is None, "start failure while IMEX runs"
        if membership.domain_uid != self._domain:
            self._failure, self._failures = "", 0
        self._domain = membership.domain_uid
        self._crash(text, ran_for=0.0, now=now)

    def reload(self, membership: decide.Membership, *, now: float) -> None:
        """Tell the running IMEX (SIGUSR1) to re-read its nodes and hosts: peers changed."""
        assert self._process is not None, "reload without IMEX"
        self._process.signal(signal.SIGUSR1)
        log.info("sent SIGUSR1 to nvidia-imex (pid %d): peers changed", self._process.pid)
        self._stats.reloaded()
        self._running = decide.Running(membership.domain_uid, membership.hosts)
        self._reload_not_before = now + RELOAD_SPACING
        self._next_check = now + CHECK_FIRST

    def stop(self) -> None:
        """Stop IMEX (SIGTERM, SIGKILL after the stop timeout); a no-op when none runs."""
        if self._process is not None:
            pid = self._process.pid
            if self._process.stop(self._stop_timeout):
                self._stats.killed()
            log.info("stopped nvidia-imex (pid %d) of domain %s", pid, self._domain)
        self._process = None
        self._running = None
        self._health, self._text = decide.Health.NOT_RUNNING, ""
        self._failure, self._failures, self._crashed = "", 0, False
        self._start_not_before = -math.inf

    def reap(self, *, now: float) -> None:
        """Handle an exit the agent did not ask for: report it, back off, restart later."""
        proc = self._process
        if proc is None or not proc.exited.is_set() or proc.stopping:
            return
        returncode = proc.returncode if proc.returncode is not None else -1
        self._crash(process.exit_text(returncode, proc.output()), ran_for=now - self._started_at,
                    now=now)  # fmt: skip

    def check(self, *, now: float) -> None:
        """Ask ``nvidia-imex-ctl -q`` when due and update the health."""
        if self._process is None or now < self._next_check:
            return
        port = self._command_port
        # Past the start timeout ctl runs anyway: its own words say why IMEX is not up.
        looked = (
            not self._ever_ready
            and port is not None
            and now - self._started_at < self._start_timeout
        )
        closed = looked and port is not None and not accepts(port)
        if closed:
            assert port is not None
            ready, ctl_text = False, f"its command port {port[0]}:{port[1]} is not open yet"
        else:
            if looked and self._port_open_at is None:
                self._port_open_at = now  # seen open just now
            ready, ctl_text = self._query()
        result = assess(
            ready=ready,
            ctl_text=ctl_text,
            previous=self._health,
            misses=self._misses,
            ever_ready=self._ever_ready,
            failure=self._failure,
            elapsed=now - self._started_at,
            start_timeout=self._start_timeout,
        )
        if result.health == decide.Health.READY and self._health != decide.Health.READY:
            log.info("nvidia-imex is READY for domain %s", self._domain)
        self._health, self._text, self._misses = result.health, result.text, result.misses
        if ready:
            self._failure, self._ever_ready = "", True
        steady = result.health == decide.Health.READY and not result.misses
        since = self._started_at if self._port_open_at is None else self._port_open_at
        interval = check_interval(steady=steady, elapsed=now - since)
        self._next_check = now + (PROBE_INTERVAL if closed else interval)

    # -- helpers ------------------------------------------------------------------------

    def _crash(self, text: str, *, ran_for: float, now: float) -> None:
        self._failures = 1 if ran_for >= STABLE_RUN else self._failures + 1
        delay = backoff(self._failures)
        log.warning("%s; starting it again in %gs", text, delay)
        self._process = None
        self._running = None
        self._crashed = True
        self._failure = text
        self._health, self._text = decide.Health.FAILED, text
        self._start_not_before = now + delay

    def _query(self) -> tuple[bool, str]:
        try:
            done = subprocess.run(
                self._check_argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return False, f"no answer within {CHECK_TIMEOUT:g}s"
        except OSError as exc:
            return False, f"cannot run {self._check_argv[0]}: {exc}"
        words = " ".join((done.stdout + " " + done.stderr).split())
        return ctl_ready(done.returncode, done.stdout), words or f"exit code {done.returncode}"
