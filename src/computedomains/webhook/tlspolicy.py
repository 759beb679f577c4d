"""Certificate lifetimes and names: settings, kept apart from the cryptography they drive.

(The command line reads these; :mod:`computedomains.webhook.certs` imports ``cryptography``,
which only the running webhook needs.)
"""

from __future__ import annotations

import dataclasses
import datetime


@dataclasses.dataclass(frozen=True)
class Validity:
    """How long certificates live and when they are replaced."""

    ca: datetime.timedelta
    """Lifetime of a CA."""
    ca_renew_before: datetime.timedelta
    """A CA this close to its end is replaced (with overlap, see :func:`plan`)."""
    cert: datetime.timedelta
    """Lifetime of a serving certificate (never past its CA's end)."""
    cert_renew_before: datetime.timedelta
    """A serving certificate this close to its end is replaced."""
    grace: datetime.timedelta
    """Time for a new Secret to reach every replica and a new caBundle every API server: the
    least time between two steps of a CA rotation."""

    def problems(self) -> list[str]:
        """What makes this combination unusable (empty when it is fine)."""
        out = []
        if not self.ca_renew_before < self.ca:
            out.append("the CA's renew-before must be shorter than its validity")
        if not self.cert_renew_before < self.cert:
            out.append("the certificate's renew-before must be shorter than its validity")
        if self.ca_renew_before < 2 * self.grace + self.cert_renew_before:
            out.append(
                "the CA's renew-before must leave room for the rotation: at least twice the "
                "grace plus the certificate's renew-before"
            )
        return out


ROUND_MARGIN = datetime.timedelta(seconds=60)
"""What a rotation step waits for beyond one resync interval: the round's own requests (the
Secret, then each caBundle target, 30 s at most each), the API servers taking up a changed
caBundle, and clock skew between nodes (a step compares its clock with the issue time of a
certificate another replica made)."""


def grace_problem(grace: datetime.timedelta, resync: datetime.timedelta) -> str:
    """Why ``grace`` is too short for replicas that re-read the Secret every ``resync``; "" if not.

    A replica serves a rotated Secret's certificate, and puts a CA missing from a caBundle
    back, only at its next round: up to one resync after the rotation. A step taken sooner
    could serve a certificate of a CA some API server does not trust yet, or drop the CA of a
    certificate a replica still serves.
    """
    least = resync + ROUND_MARGIN
    if grace > least:
        return ""
    return (
        f"the rotation grace ({grace.total_seconds():g}s) must exceed the resync interval "
        f"({resync.total_seconds():g}s) by more than {ROUND_MARGIN.total_seconds():g}s: a "
        "replica serves a rotated certificate (and puts a missing CA back into the caBundles) "
        f"only at its next round; raise the grace above {least.total_seconds():g}s or lower "
        "the resync interval"
    )


def service_names(service: str, namespace: str, cluster_domain: str) -> tuple[str, ...]:
    """The DNS names the serving certificate covers: how the API server may name the Service."""
    base = f"{service}.{namespace}.svc"
    return (service, f"{service}.{namespace}", base, f"{base}.{cluster_domain}")
