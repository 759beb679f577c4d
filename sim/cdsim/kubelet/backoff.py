"""Capped exponential backoff, as the kubelet uses for restarts and retried calls."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Backoff:
    """Delays of ``initial``, doubling per failure up to ``cap``; :meth:`reset` on success.

    With ``first_free`` the first failure costs no delay: the kubelet restarts a container
    that exited for the first time at once and backs off from the second exit on.
    """

    initial: float = 1.0
    cap: float = 30.0
    first_free: bool = False
    failures: int = 0
    not_before: float = 0.0
    """Monotonic time before which the next attempt waits."""

    def failed(self, now: float) -> float:
        """Record a failure at ``now``; returns the delay until the next attempt."""
        self.failures += 1
        counted = self.failures - 1 if self.first_free else self.failures
        delay = 0.0 if counted == 0 else min(self.cap, self.initial * 2.0 ** (counted - 1))
        self.not_before = now + delay
        return delay

    def reset(self) -> None:
        """Forget past failures: the next attempt may run at once."""
        self.failures = 0
        self.not_before = 0.0

    def ready(self, now: float) -> bool:
        """True when an attempt may run at ``now``."""
        return now >= self.not_before
