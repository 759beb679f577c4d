"""Why a claim could not be prepared: the kubelet retries either way, users read the reason."""

from __future__ import annotations


class PrepareError(Exception):
    """A per-claim failure, reported in the claim's result and as an Event."""

    retryable = True

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        """CamelCase, for Events and metrics."""
        self.message = message
        self.pods: tuple[tuple[str, str], ...] = ()
        """(name, uid) of the pods waiting for the claim, once known: they get the Event too."""


class Permanent(PrepareError):
    """Retrying the same claim cannot succeed (wrong namespace, bad config, stale claim)."""

    retryable = False


class Retryable(PrepareError):
    """Will likely succeed later (IMEX not ready yet, node busy with another domain)."""
