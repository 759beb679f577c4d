"""A work queue of keys for controllers: deduplicated, delayed, rate limited per key.

The contract workers rely on, as in client-go's queue:

- a key waiting in the queue is there once, however often it is added;
- a key is handed to one worker at a time: added while a worker holds it, it is queued again
  when that worker calls :meth:`WorkQueue.done`, never given to a second worker meanwhile;
- :meth:`WorkQueue.add_rate_limited` delays a failing key exponentially (with jitter, so
  keys that failed together do not retry in lock-step), and :meth:`WorkQueue.forget`
  resets that after a success;
- :meth:`WorkQueue.shutdown` wakes every waiting worker with ``None``.

The clock is injectable, so tests drive delays without sleeping.
"""

from __future__ import annotations

import collections
import heapq
import random
import threading
import time
from collections.abc import Callable

DEFAULT_BASE_DELAY = 0.1
"""Seconds before the first retry of a failed key: long enough not to hammer the API
server on a persistent error, short enough that a transient one heals unnoticed."""
DEFAULT_MAX_DELAY = 30.0
"""Cap of the per-key backoff: a key that keeps failing is still retried twice a minute."""
DEFAULT_JITTER = 0.5
"""Each delay is stretched by a random factor in [1, 1 + jitter]."""


def backoff(
    failures: int, *, base: float, cap: float, jitter: float, draw: Callable[[], float]
) -> float:
    """The delay before retry number ``failures`` (1 = first retry): base·2ⁿ⁻¹, jittered, capped.

    ``draw`` returns a number in [0, 1).
    """
    exponent = min(max(failures - 1, 0), 62)  # 2**62 seconds is beyond any cap
    return min(base * 2.0**exponent * (1 + jitter * draw()), cap)


class WorkQueue:
    """Keys to process; safe to share between threads."""

    def __init__(
        self,
        *,
        base_delay: float = DEFAULT_BASE_DELAY,
        max_delay: float = DEFAULT_MAX_DELAY,
        jitter: float = DEFAULT_JITTER,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._base = base_delay
        self._cap = max_delay
        self._jitter = jitter
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy
        self._cond = threading.Condition()
        self._ready: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        """Keys added while a worker held them: queued again on ``done``."""
        self._due: dict[str, float] = {}
        self._timers: list[tuple[float, str]] = []
        """Heap of (due time, key); entries superseded in ``_due`` are skipped when popped."""
        self._failures: dict[str, int] = {}
        self._shutdown = False

    # -- adding ---------------------------------------------------------------------------

    def add(self, key: str) -> None:
        """Queue ``key`` now (a no-op when it is already waiting to be processed)."""
        with self._cond:
            self._add_locked(key)

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` once ``delay`` seconds have passed; an earlier pending add wins."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown or key in self._queued:
                return
            due = self._clock() + delay
            if self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._timers, (due, key))
            self._cond.notify()

    def add_rate_limited(self, key: str) -> float:
        """Queue ``key`` after its backoff (one more failure); returns the delay chosen."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = backoff(
                failures, base=self._base, cap=self._cap, jitter=self._jitter, draw=self._rng.random
            )
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset the backoff of ``key`` (it was processed successfully)."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        """How many times in a row ``key`` failed."""
        with self._cond:
            return self._failures.get(key, 0)

    # -- taking ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to process, or None on shutdown or when ``timeout`` passes first.

        The caller owns the key until it calls :meth:`done`.
        """
        with self._cond:
            deadline = None if timeout is None else self._clock() + timeout
            while True:
                now = self._clock()
                self._promote(now)
                if self._shutdown:
                    return None
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                waits = [t - now for t in (deadline, self._next_due()) if t is not None]
                wait = min(waits) if waits else None
                if deadline is not None and now >= deadline:
                    return None
                self._cond.wait(wait)

    def done(self, key: str) -> None:
        """The worker finished ``key``; queue it again if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def shutdown(self) -> None:
        """Stop handing out keys; every waiting :meth:`get` returns None."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        """Keys ready to be processed now (the queue depth)."""
        with self._cond:
            return len(self._ready)

    def delayed(self) -> int:
        """Keys waiting for their delay to pass."""
        with self._cond:
            return len(self._due)

    # -- internals ------------------------------------------------------------------------

    def _add_locked(self, key: str) -> None:
        if self._shutdown or key in self._queued:
            return
        self._due.pop(key, None)  # an immediate add supersedes a delayed one
        if key in self._processing:
            self._dirty.add(key)
            return
        self._ready.append(key)
        self._queued.add(key)
        self._cond.notify()

    def _promote(self, now: float) -> None:
        """Move keys whose delay has passed to the ready queue."""
        while self._timers and self._timers[0][0] <= now:
            due, key = heapq.heappop(self._timers)
            if self._due.get(key) == due:
                del self._due[key]
                self._add_locked(key)

    def _next_due(self) -> float | None:
        while self._timers and self._due.get(self._timers[0][1]) != self._timers[0][0]:
            heapq.heappop(self._timers)  # superseded
        return self._timers[0][0] if self._timers else None
