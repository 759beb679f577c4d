"""Capped exponential backoff, as the kubelet uses for restarts and retried calls."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Backoff:
    """Delays of ``initial``, doubling per failure up to ``cap``; :meth:`reset` on success."""

    initial: float = 1.0
    cap: float = 30.0
    failures: int = 0
    not_before: float = 0.0
    """Monotonic time before which the next attempt waits."""

    def failed(self, now: float) -> float:
        """Record a failure at ``now``; returns the delay until the next attempt."""
        self.failures += 1
        delay = min(self.cap, self.initial * 2.0 ** (self.failures - 1))
        self.not_before = now + delay
        return delay

    def reset(self) -> None:
        """Forget past failures: the next attempt may run at once."""
        self.failures = 0
        self.not_before = 0.0

    def ready(self, now: float) -> bool:
        """True when an attempt may run at ``now``."""
        return now >= self.not_before
