"""The TLS Secret on the API server: read it, and (self-managed) create or rotate it.

Two replicas start at once and may both find no Secret: both plan, one create wins, the other
gets a conflict, reads the winner's Secret and plans again from it (which then keeps it). An
update carries the resourceVersion it was planned from for the same reason. With
cert-manager the Secret is cert-manager's: it is only read.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable, Sequence
from typing import Any

from computedomains.api import resources
from computedomains.kube import client
from computedomains.webhook import certs, tlspolicy

log = logging.getLogger(__name__)
ATTEMPTS = 5
"""Plans in a row that may lose a race to another replica before the round gives up."""

Clock = Callable[[], datetime.datetime]


def utcnow() -> datetime.datetime:
    """The wall clock, timezone-aware (certificate times are UTC)."""
    return datetime.datetime.now(datetime.UTC)


class NotYet(Exception):
    """No usable Secret yet (cert-manager has not issued it, or it is incomplete)."""


@dataclasses.dataclass(frozen=True)
class Store:
    """Where the Secret lives, and how to read and write it."""

    api: client.Client
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """The Secret's API path."""
        return resources.SECRETS.path(self.name, namespace=self.namespace)

    def read(self) -> dict[str, Any] | None:
        """The Secret, or None when there is none."""
        return self.api.find(self.path)

    def write(self, bundle: certs.Bundle, *, current: dict[str, Any] | None) -> None:
        """Create the Secret, or replace ``current`` (409 when it changed meanwhile)."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": certs.SECRET_TYPE,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": bundle.secret_data(),
        }
        if current is None:
            self.api.create(resources.SECRETS.path(namespace=self.namespace), body)
            return
        meta = current["metadata"]
        body["metadata"] |= {
            "resourceVersion": meta["resourceVersion"],
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        }
        body["type"] = current.get("type", certs.SECRET_TYPE)
        self.api.replace(self.path, body)


def read_bundle(store: Store) -> certs.Bundle:
    """cert-manager mode: the Secret as it is; :class:`NotYet` while it is missing or partial."""
    secret = store.read()
    if secret is None:
        raise NotYet(f"Secret {store.namespace}/{store.name} does not exist yet")
    try:
        return certs.from_secret_data(secret.get("data") or {}, need_ca_key=False)
    except certs.Invalid as exc:
        raise NotYet(f"Secret {store.namespace}/{store.name} is not usable yet: {exc}") from None


def current_ca(store: Store) -> bytes | None:
    """``ca.crt`` as the Secret holds it now (as :attr:`certs.Bundle.ca_pem` writes it).

    None when there is no Secret or it is unusable: then no bundle is current.
    """
    secret = store.read()
    if secret is None:
        return None
    try:
        return certs.from_secret_data(secret.get("data") or {}, need_ca_key=False).ca_pem
    except certs.Invalid:
        return None


def ensure(
    store: Store, *, names: Sequence[str], validity: tlspolicy.Validity, clock: Clock = utcnow
) -> certs.Bundle:
    """Self-managed mode: the Secret's bundle after the step it needs now, written if changed."""
    for _ in range(ATTEMPTS):
        secret = store.read()
        bundle = _parse(store, secret)
        now = clock()
        decision = certs.plan(bundle, now=now, names=names, validity=validity)
        if decision.action is certs.Action.KEEP:
            assert bundle is not None
            return bundle
        new = certs.carry_out(decision, bundle, now=now, names=names, validity=validity)
        try:
            store.write(new, current=secret)
        except client.ApiError as exc:
            if exc.failure is not client.Failure.CONFLICT:
                raise
            log.info("Secret %s changed while planning (another replica): planning again",
                     store.name)  # fmt: skip
            continue
        log.info("Secret %s/%s: %s (%s)", store.namespace, store.name, decision.action.value,
                 decision.reason)  # fmt: skip
        return new
    raise client.ApiError(
        client.CONFLICT, "Conflict", f"Secret {store.name} kept changing: {ATTEMPTS} plans lost"
    )


def _parse(store: Store, secret: dict[str, Any] | None) -> certs.Bundle | None:
    if secret is None:
        return None
    try:
        return certs.from_secret_data(secret.get("data") or {}, need_ca_key=True)
    except certs.Invalid as exc:
        log.warning("Secret %s/%s is unusable (%s): replacing it", store.namespace, store.name, exc)
        return None
