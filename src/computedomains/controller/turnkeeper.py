"""The thin act step of :mod:`turns`: decide whose turn it is, write it for the plugins.

The plugins read it from ``placement.TURN_CONFIGMAP``. Leader only; a new leader starts from
nobody's turn.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable

from computedomains.api import placement, resources
from computedomains.controller import turnactivity, turns
from computedomains.controller.caches import Caches
from computedomains.kube import client, writes

log = logging.getLogger(__name__)

TICK = 1.0
"""Seconds between decisions while a domain's placing window may expire."""
SPACING = 0.2
"""Seconds at least between two decisions: each reads every claim in the cache."""


class TurnKeeper:
    """Keeps :data:`placement.TURN_CONFIGMAP` in step with :func:`turns.step`."""

    def __init__(
        self,
        api: client.Client,
        caches: Caches,
        *,
        enabled: bool,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._caches = caches
        self._activity = turnactivity.Reader(caches)
        self._enabled = enabled
        self._may_write = may_write
        self._clock = clock
        self._lock = threading.Lock()
        self._state = turns.State()
        self._written: str | None = None
        self._written_at = 0.0
        self._placing: set[str] = set()
        self._settle_pending = False
        """A turn ended (or a leader started): re-stamp the settle once nobody's turn is written."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def changed(self) -> None:
        """A claim or a domain changed: decide again soon."""
        self._wake.set()

    def settling(self) -> float:
        """Seconds until a claim on a free node may be granted (``turns.SETTLE``)."""
        with self._lock:
            return turns.settling(self._state, self._clock())

    def start(self) -> None:
        """Start deciding (on becoming leader): nobody's turn until the first decision.

        Switched off, it only says that it is nobody's turn, once (a turn left by an earlier
        configuration would also go stale by itself: ``placement.TURN_STALE_SECONDS``).
        """
        if not self._enabled:
            try:
                self._write("")
            except Exception:  # best effort: a leftover turn goes stale anyway
                log.warning("could not clear the placement turn", exc_info=True)
            return
        with self._lock:
            # The last leader's turn may have allocations in flight: settle before granting.
            self._state, self._written = turns.State(ended_at=self._clock()), None
            self._settle_pending = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="turns", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop deciding (on losing leadership); the record stays until the next leader's.

        Returns whether the deciding thread ended within ``timeout``.
        """
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.error("placement turns still busy after %.0fs", timeout)
                return False
        return True

    def _work(self) -> None:
        stop = self._stop
        while not stop.is_set():
            self._wake.clear()
            try:
                self.decide()
            except writes.Fenced as exc:
                log.info("%s", exc)
            except Exception:  # the next tick decides again
                log.exception("deciding the placement turn failed")
            if not stop.wait(SPACING):
                self._wake.wait(TICK - SPACING)

    def decide(self) -> str:
        """One decision from the caches, written when it changed; returns the turn."""
        now = self._clock()
        with self._lock:
            before = self._state
            live, gone_waiting = self._activity.read()
            self._state = turns.step(before, live, now, gone_waiting)
            turn = self._state.turn
            placing = turns.placing(self._state, now)
            if turns.ended(before, self._state):
                self._settle_pending = True
        if placing != self._placing:
            shown = ", ".join(sorted(placing)[:3]) + (", ..." if len(placing) > 3 else "")
            log.info("%d domain(s) placing%s", len(placing), f": {shown}" if placing else "")
            self._placing = placing
        renew = bool(turn) and now - self._written_at >= placement.TURN_RENEW_SECONDS
        if turn != self._written or renew:
            changed = turn != self._written
            self._write(turn)
            if not turn and self._settle_pending:
                # The settle counts from when the plugins can see that the turn ended.
                with self._lock:
                    self._state = dataclasses.replace(self._state, ended_at=self._clock())
                    self._settle_pending = False
            elif turn:
                self._settle_pending = False
            if changed:
                log.info("placement turn: %s", f"ComputeDomain {turn}" if turn else "nobody's "
                         "(binding conditions on free nodes)")  # fmt: skip
        return turn

    def _fence(self) -> None:
        """Raise unless this replica may still write (the leader's client checks every try)."""
        if not self._may_write():
            raise writes.Fenced("not writing the turn: this replica may no longer lead")

    def _write(self, turn: str) -> None:
        self._fence()
        namespace = self._caches.namespace
        path = resources.CONFIG_MAPS.path(placement.TURN_CONFIGMAP, namespace=namespace)
        body = placement.turn_configmap(
            turn, namespace=namespace, now=datetime.datetime.now(datetime.UTC)
        )
        try:
            # No resourceVersion: the turn is overwritten whole, so only the fence of the
            # leader's client keeps a deposed leader's retried write from replacing its
            # successor's.
            self._api.replace(path, body)
        except client.ApiError as exc:
            if exc.failure is not client.Failure.NOT_FOUND:
                raise
            self._api.create(resources.CONFIG_MAPS.path(namespace=namespace), body)
        self._written, self._written_at = turn, self._clock()
