"""Each domain's workload ResourceClaimTemplate: created, deleted, trouble reported once.

The thin act step of the plan's ``create_template`` and ``delete_template``
(:mod:`computedomains.controller.reconciler` calls it in its round). A template the API
refuses to create, or whose name a foreign object has taken, is reported once (a log line and
a Warning Event) and tried again on its own: the rest of the round (cliques, status) goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from computedomains.api import constants, resources
from computedomains.api.domainview import Domain
from computedomains.controller import objects
from computedomains.controller.eventplan import EventSpec, Reason
from computedomains.kube import client, writes

log = logging.getLogger(__name__)

_TAKEN = "taken"
"""Template trouble: a foreign object has the template's name."""


class WorkloadTemplates:
    """Creates and deletes domains' workload templates, and remembers what went wrong."""

    def __init__(
        self,
        api: client.Client,
        *,
        fence: Callable[[], None],
        emit: Callable[[Domain, EventSpec], None],
        delete: Callable[[str, Mapping[str, Any]], None],
    ) -> None:
        """``delete`` removes exactly the object given (a changed one makes the plan stale)."""
        self._api = api
        self._fence = fence
        self._emit = emit
        self._delete = delete
        self._lock = threading.Lock()
        self._trouble: dict[str, str] = {}
        """Per domain, why its template could not be created (reported once):
        :data:`_TAKEN`, or the API's answer to the create."""

    def domains(self) -> set[str]:
        """The domains with template trouble remembered."""
        with self._lock:
            return set(self._trouble)

    def forget(self, uid: str) -> None:
        """Forget the trouble reported for domain ``uid``."""
        with self._lock:
            self._trouble.pop(uid, None)

    def create(self, domain: Domain) -> None:
        """Create ``domain``'s template; a conflict or a refusal is reported, not raised."""
        path = resources.RESOURCE_CLAIM_TEMPLATES.path(domain.template, namespace=domain.namespace)
        with self._lock:
            known_conflict = self._trouble.get(domain.uid) == _TAKEN
        if known_conflict:
            # Reported already: look (a read) before trying again, so that a foreign
            # template sitting there costs no failed write on every round.
            existing = self._get(path)
            if existing is not None:
                return
        self._fence()
        try:
            self._api.create(resources.RESOURCE_CLAIM_TEMPLATES.path(namespace=domain.namespace),
                             objects.workload_template(domain))  # fmt: skip
        except client.ApiError as exc:
            if exc.failure is client.Failure.CONFLICT:
                existing = self._get(path)
                if existing is None or objects.owned_by(existing, domain.uid):
                    return  # ours (the cache is behind), or gone again: the next round sees
                self._report_conflict(domain, existing)
                return
            if exc.failure not in (client.Failure.REFUSED, client.Failure.NOT_FOUND):
                raise
            # The API will refuse the same object next round too: say so where the user
            # looks, and let the rest of the round (cliques, status) go on.
            self._report(domain, str(exc), Reason.TEMPLATE_REJECTED,
                         f"creating ResourceClaimTemplate {domain.namespace}/"
                         f"{domain.template} was refused: {exc}")  # fmt: skip
            return
        with self._lock:
            self._trouble.pop(domain.uid, None)
        created = f"created ResourceClaimTemplate {domain.template}"
        self._emit(domain, EventSpec(Reason.TEMPLATE_CREATED, created))

    def _report_conflict(self, domain: Domain, existing: dict[str, Any]) -> None:
        labels = existing.get("metadata", {}).get("labels") or {}
        owner = (
            "another ComputeDomain"
            if labels.get(constants.COMPUTE_DOMAIN_LABEL)
            else "no ComputeDomain"
        )
        message = (
            f"ResourceClaimTemplate {domain.namespace}/{domain.template} already exists and "
            f"belongs to {owner}; it is left as it is. Delete it, or create the ComputeDomain "
            "with another spec.channel.resourceClaimTemplate.name"
        )
        self._report(domain, _TAKEN, Reason.TEMPLATE_CONFLICT, message)

    def _report(self, domain: Domain, trouble: str, reason: Reason, message: str) -> None:
        """A Warning Event, once per domain and trouble."""
        with self._lock:
            if self._trouble.get(domain.uid) == trouble:
                return
            self._trouble[domain.uid] = trouble
        log.warning("domain %s/%s: %s", domain.namespace, domain.name, message)
        self._emit(domain, EventSpec(reason, message, warning=True))

    def delete(self, domain: Domain) -> None:
        """Delete ``domain``'s template if it is ours, releasing the incumbent's finalizer."""
        path = resources.RESOURCE_CLAIM_TEMPLATES.path(domain.template, namespace=domain.namespace)
        existing = self._get(path)
        if existing is None or not objects.owned_by(existing, domain.uid):
            return
        self._fence()
        finalizers = existing.get("metadata", {}).get("finalizers") or []
        if constants.FINALIZER in finalizers:
            # The incumbent's templates carry its finalizer (ours never do), and nothing of
            # the incumbent is left to remove it once we adopted the domain.
            # An update of what was read (its resourceVersion guards it): the controller's
            # RBAC has update on templates, not patch.
            kept = [f for f in finalizers if f != constants.FINALIZER]
            released = {**existing, "metadata": {**existing["metadata"], "finalizers": kept}}
            try:
                existing = self._api.replace(path, released)
            except client.ApiError as exc:
                if exc.failure is client.Failure.CONFLICT:
                    raise writes.Stale.from_conflict(exc) from exc
                if exc.failure is client.Failure.NOT_FOUND:
                    return
                raise
        self._delete(path, existing)

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self._api.get(path)
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND:
                return None
            raise
