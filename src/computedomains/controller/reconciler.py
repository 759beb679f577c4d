"""The thin act step of a reconcile: carry out the plan :mod:`decide` made.

Order matters where others wait on us: the finalizer first (so a deletion can never skip the
clean-up), then the template, then the cliques (agents wait on their slots), Events, and the
status last (people read it; nothing waits on it). Every update carries the resourceVersion
it was computed from, starting from the cache overlaid with our own latest writes, so a
single writer never meets a conflict. Any API error aborts the round: the work queue retries
the domain with backoff, and the next round recomputes everything from the caches.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from computedomains.api import constants, models
from computedomains.controller import decide, objects
from computedomains.controller.caches import Caches
from computedomains.controller.eventplan import EventSpec, Reason
from computedomains.controller.metrics import FormationClock
from computedomains.controller.views import CliqueID, Domain, DomainUID
from computedomains.kube import client, events, writes

log = logging.getLogger(__name__)
STATUS_INTERVAL = 2.0
"""Seconds between status writes of one domain (the incumbent syncs every 2 s too). Changes
in between are written together, with their Events; slot and address changes, which agents
wait for, are never held back. This is what bounds the writes of a formation whose nodes
arrive one by one."""


def _delete_options(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Delete exactly the object we looked at, not a successor of the same name."""
    meta = obj.get("metadata", {})
    return {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
    }


class Reconciler:
    """Reconciles one ComputeDomain at a time (the work queue serialises each domain)."""

    def __init__(
        self,
        api: client.Client,
        caches: Caches,
        *,
        limit: int,
        recorder: events.Recorder,
        formation: FormationClock,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._clock = clock
        self._next_flush: dict[str, float] = {}
        self._caches = caches
        self._limit = limit
        self._recorder = recorder
        self._formation = formation
        self._lock = threading.Lock()
        self._reported: dict[str, frozenset[str]] = {}
        self._conflicts: set[str] = set()
        """Domains whose template name is taken by a foreign object (reported once)."""

    def reconcile(self, uid: str) -> float | None:
        """One level-triggered round for domain ``uid``; returns when to come back, if held."""
        raw = self._caches.domain(uid)
        if raw is None:
            self._forget(uid)
            return None
        snapshot = self._caches.snapshot(raw)
        domain = snapshot.domain
        if domain.deleting and not domain.finalized:
            self._forget(uid)  # not ours to order any more; the collector takes leftovers
            return None
        now = self._clock()
        with self._lock:
            reported = self._reported.get(uid, frozenset())
            due = self._next_flush.get(uid, now)
        plan = decide.plan(snapshot, limit=self._limit, reported=reported, flush=now >= due)
        if plan.add_finalizer:
            raw = self._finalizer(raw, present=True) or raw
        if plan.create_template:
            self._create_template(domain)
        if plan.delete_template:
            self._delete_template(domain)
        self._write_cliques(domain.uid, plan.cliques)
        for event in plan.events:
            self._emit(domain, event)
        if plan.status is not None:
            raw = self._write_status(raw, plan.status)
        # After the write they describe: a failed write recomputes them, none is doubled.
        for event in plan.status_events:
            self._emit(domain, event)
        self._formation.joined(uid, plan.assigned, domain_ready=plan.domain_ready)
        self._formation.ready(uid, plan.became_ready, domain_ready=plan.domain_ready)
        with self._lock:
            self._reported[uid] = plan.reported
            if plan.status is not None:
                self._next_flush[uid] = now + STATUS_INTERVAL
        if plan.remove_finalizer:
            self._finalizer(raw, present=False)
            self._forget(uid)
            log.info("domain %s/%s released", domain.namespace, domain.name)
        return max(due - now, 0.0) if plan.deferred else None

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._reported.pop(uid, None)
            self._conflicts.discard(uid)
            self._next_flush.pop(uid, None)
        self._formation.forget(uid)

    # -- the domain object ----------------------------------------------------------------

    def _finalizer(self, raw: dict[str, Any], *, present: bool) -> dict[str, Any] | None:
        def mutate(obj: dict[str, Any]) -> dict[str, Any] | None:
            finalizers = list(obj["metadata"].get("finalizers") or [])
            if (constants.FINALIZER in finalizers) == present:
                return None
            if present:
                finalizers.append(constants.FINALIZER)
            else:
                finalizers.remove(constants.FINALIZER)
            obj["metadata"]["finalizers"] = finalizers
            return obj

        meta = raw["metadata"]
        path = objects.domain_path(meta["namespace"], meta["name"])
        try:
            updated = writes.read_modify_write(self._api, path, mutate, current=raw)
        except client.ApiError as exc:
            if exc.status == client.NOT_FOUND and not present:
                return None  # gone already
            raise
        if updated is not None and present:
            self._caches.written_domains.wrote(updated)
        return updated

    def _write_status(
        self, raw: dict[str, Any], status: models.ComputeDomainStatus
    ) -> dict[str, Any]:
        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            obj["status"] = status.to_dict()
            return obj

        meta = raw["metadata"]
        path = objects.domain_path(meta["namespace"], meta["name"])
        updated = writes.read_modify_write(
            self._api, path, mutate, current=raw, subresource="status"
        )
        assert updated is not None  # mutate always changes something
        self._caches.written_domains.wrote(updated)
        return updated

    def _emit(self, domain: Domain, event: EventSpec) -> None:
        ref = events.ObjectRef(
            kind=constants.COMPUTE_DOMAIN_KIND, name=domain.name, namespace=domain.namespace,
            uid=domain.uid, api_version=constants.API_VERSION,
        )  # fmt: skip
        self._recorder.emit(ref, reason=event.reason, message=event.message, warning=event.warning)

    # -- the workload template ------------------------------------------------------------

    def _create_template(self, domain: Domain) -> None:
        path = objects.templates_path(domain.namespace, domain.template)
        with self._lock:
            known_conflict = domain.uid in self._conflicts
        if known_conflict:
            # Reported already: look (a read) before trying again, so that a foreign
            # template sitting there costs no failed write on every round.
            existing = self._get(path)
            if existing is not None:
                return
        try:
            self._api.create(objects.templates_path(domain.namespace),
                             objects.workload_template(domain))  # fmt: skip
        except client.ApiError as exc:
            if exc.status != client.CONFLICT:
                raise
            existing = self._get(path)
            if existing is None or objects.owned_by(existing, domain.uid):
                return  # ours (the cache is behind), or gone again: the next round sees
            self._report_conflict(domain, existing)
            return
        with self._lock:
            self._conflicts.discard(domain.uid)
        created = f"created ResourceClaimTemplate {domain.template}"
        self._emit(domain, EventSpec(Reason.TEMPLATE_CREATED, created))

    def _report_conflict(self, domain: Domain, existing: dict[str, Any]) -> None:
        with self._lock:
            if domain.uid in self._conflicts:
                return
            self._conflicts.add(domain.uid)
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
        log.warning("domain %s/%s: %s", domain.namespace, domain.name, message)
        self._emit(domain, EventSpec(Reason.TEMPLATE_CONFLICT, message, warning=True))

    def _delete_template(self, domain: Domain) -> None:
        path = objects.templates_path(domain.namespace, domain.template)
        existing = self._get(path)
        if existing is None or not objects.owned_by(existing, domain.uid):
            return
        self._delete(path, existing)

    # -- cliques --------------------------------------------------------------------------

    def _write_cliques(
        self, uid: DomainUID, changes: Mapping[CliqueID, tuple[models.CliqueDaemon, ...]]
    ) -> None:
        if not changes:
            return
        current = self._caches.cliques_of(uid)
        namespace = self._caches.namespace
        for clique, daemons in sorted(changes.items()):
            existing = current.get(clique)
            path = objects.cliques_path(namespace, objects.clique_name(uid, clique))
            if not daemons:
                if existing is not None:
                    self._delete(path, existing)
                    self._caches.written_cliques.deleted(existing["metadata"]["uid"])
                continue
            listed = [d.to_dict() for d in daemons]
            if existing is None:
                body = objects.clique_object(
                    namespace=namespace, uid=uid, clique=clique, daemons=daemons
                )
                stored = self._api.create(objects.cliques_path(namespace), body)
            else:

                def mutate(obj: dict[str, Any], listed: list[Any] = listed) -> dict[str, Any]:
                    obj["daemons"] = listed
                    return obj

                written = writes.read_modify_write(self._api, path, mutate, current=existing)
                assert written is not None
                stored = written
            self._caches.written_cliques.wrote(stored)

    # -- helpers --------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self._api.get(path)
        except client.ApiError as exc:
            if exc.status == client.NOT_FOUND:
                return None
            raise

    def _delete(self, path: str, existing: Mapping[str, Any]) -> None:
        try:
            self._api.delete(path, body=_delete_options(existing))
        except client.ApiError as exc:
            if exc.status != client.NOT_FOUND:
                raise
