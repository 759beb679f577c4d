"""When a failed API request is tried again, and how long to wait first (pure).

The rules of client-go, which every Kubernetes component shares:

- **429 Too Many Requests** (API Priority and Fairness, or a webhook's limit): the server did
  not act, so any request is sent again, after its ``Retry-After``;
- **a 5xx with ``Retry-After``**: the server asks to come back later: any request, after
  that wait (as client-go; a write it may have carried out then meets its precondition or
  name conflict);
- **another 5xx, or the connection lost mid-request**: the server may have acted, so only a
  read is sent again (a write's outcome is the caller's to find out);
- **the connection not made at all**: nothing was sent, so any request is sent again.

Waits double from :attr:`Policy.backoff_initial` up to :attr:`Policy.backoff_cap`. Every wait,
a ``Retry-After`` included, is stretched by up to :attr:`Policy.jitter` at random (``draw``),
so clients refused together do not come back together: a server that tells 2,000 nodes
``Retry-After: 5`` sees them back over 5 to 7.5 s, not all at 5 s. A ``Retry-After`` is a
floor (never sent sooner than asked), and the wait it makes is capped at
:attr:`Policy.retry_after_cap`.
"""

from __future__ import annotations

import dataclasses
import email.utils
import time

TOO_MANY_REQUESTS = 429
READS = frozenset({"GET", "HEAD"})
"""Methods sent again whatever happened to the first try: they change nothing."""


@dataclasses.dataclass(frozen=True)
class Policy:
    """How often and how patiently one request is tried."""

    attempts: int = 5
    """Tries in all, the first included."""
    backoff_initial: float = 0.25
    backoff_cap: float = 4.0
    retry_after_cap: float = 30.0
    jitter: float = 0.5
    """A wait is stretched by up to this fraction of itself (client-go's ``Jitter``)."""

    def backoff(self, attempt: int, draw: float = 0.0) -> float:
        """Seconds before try ``attempt + 1`` (0-based ``attempt``) when the server named none.

        ``draw`` in [0, 1) picks the stretch (the caller's random number; 0: none).
        """
        base = min(self.backoff_cap, self.backoff_initial * 2.0 ** min(attempt, 30))
        return self.spread(base, draw)

    def spread(self, wait: float, draw: float = 0.0) -> float:
        """``wait`` stretched by ``draw`` (in [0, 1)) times :attr:`jitter` of itself; never less."""
        return wait * (1.0 + self.jitter * draw)


def retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date).

    None when it is absent or unreadable.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def after_answer(
    policy: Policy,
    method: str,
    status: int,
    retry_after_header: str | None,
    attempt: int,
    *,
    draw: float = 0.0,
) -> float | None:
    """Seconds to wait before sending again after an HTTP answer of ``status``; None: do not.

    ``attempt`` counts from 0 (the first try); ``draw`` as for :meth:`Policy.backoff`, and it
    spreads a ``Retry-After`` too: between what was asked and :attr:`Policy.jitter` more,
    at most :attr:`Policy.retry_after_cap`.
    """
    if attempt + 1 >= policy.attempts:
        return None
    asked = retry_after(retry_after_header)
    if status == TOO_MANY_REQUESTS or (status >= 500 and asked is not None):
        # The same wait for every client refused at once brings them all back at once.
        waited = policy.backoff(attempt, draw) if asked is None else policy.spread(asked, draw)
        return min(policy.retry_after_cap, waited)
    if status >= 500 and method.upper() in READS:
        return policy.backoff(attempt, draw)
    return None


def after_failure(
    policy: Policy, method: str, *, sent: bool, attempt: int, draw: float = 0.0
) -> float | None:
    """Seconds to wait before sending again after no answer came; None: do not.

    ``sent`` is False when the connection was never made (nothing reached the server);
    ``draw`` as for :meth:`Policy.backoff`.
    """
    if attempt + 1 >= policy.attempts:
        return None
    if not sent or method.upper() in READS:
        return policy.backoff(attempt, draw)
    return None
