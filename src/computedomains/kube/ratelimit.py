"""A process's request budget: a token bucket of QPS and burst, as client-go's.

Each request takes a token; tokens come back at ``qps`` per second, up to ``burst`` saved. A
request that finds none waits its turn (requests are served in order of asking), so a
component that falls into a loop of writes slows down instead of flooding the API server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """``qps`` requests per second on average, ``burst`` at once; ``qps <= 0`` limits nothing."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._at = clock()

    def take(self) -> float:
        """Take one token, waiting for it if need be; the seconds waited."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0  # reserved now: later askers queue behind this one
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait
