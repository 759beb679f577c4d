"""The thin act step of a reconcile: carry out the plan :mod:`decide` made.

Order matters where others wait on us: the finalizer first (so a deletion can never skip the
clean-up), then the template, then the cliques (the membership record: agents and prepares wait
on it), Events, the status (people and the formation clock read it), and the node labels last:
they are only a copy of the record for the incumbent's tools, so up to one patch per member
must not delay what others wait for. Every update carries the resourceVersion it was computed
from, starting from the cache overlaid with our own latest writes, so a single writer never
meets a conflict. Any API error aborts the round: the work queue retries the domain with
backoff, and the next round recomputes everything from the caches. Two refusals do not: a
template the API refuses to create (:mod:`workloadtemplates`), and a label copy it refuses to
write (:mod:`labelcopies`), are reported once and tried again on their own, so the status goes
on being written on time. At ``-v 1`` each round logs its membership and status decisions
(:mod:`decisionlines`).

Writes are fenced twice. Before each one, ``may_write`` (the elector's own view of its
lease) must still say yes, or :class:`writes.Fenced` aborts the round: a replica whose lease
may have expired writes nothing more. The controller's client for them
(:func:`writes.fenced`) asks again before every try, so a write held up in the client's
retries (a 429, a back-off) is not sent once the lease may be gone. And a clique or status
write is planned from a snapshot, so a conflict means the snapshot was old (another leader
wrote meanwhile): the round ends with :class:`writes.Stale` and the next one plans again;
the old plan is never applied on top of the newer object. Only the finalizer, a change
computed from the object itself, is retried on a fresh copy.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from computedomains import rfc3339, trace
from computedomains.api import constants, models, resources
from computedomains.api.domainview import Domain, DomainUID
from computedomains.controller import (
    decide,
    decisionlines,
    labelcopies,
    objects,
    workloadtemplates,
)
from computedomains.controller.caches import Caches
from computedomains.controller.eventplan import EventSpec
from computedomains.controller.metrics import FormationClock
from computedomains.controller.views import CliqueID, Snapshot
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
        recorder: events.Emitter,
        formation: FormationClock,
        may_write: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._api = api
        self._wall_clock = wall_clock
        self._may_write = may_write
        self._clock = clock
        self._next_flush: dict[str, float] = {}
        self._caches = caches
        self._limit = limit
        self._recorder = recorder
        self._formation = formation
        self._lock = threading.Lock()
        self._reported: dict[str, frozenset[str]] = {}
        self._members: dict[str, tuple[models.ComputeDomainNode, ...]] = {}
        """Per domain, every member of the status last written (it lists at most 256)."""
        self._trace = trace.Tracer("controller")
        self._templates = workloadtemplates.WorkloadTemplates(
            api, fence=self._fence, emit=self._emit, delete=self._delete
        )
        self._labels = labelcopies.LabelCopies(api, fence=self._fence, emit=self._emit)

    def reconcile(self, uid: str) -> float | None:
        """One level-triggered round for domain ``uid``; returns when to come back, if held."""
        raw = self._caches.domain(uid)
        if raw is None:
            self._forget(uid)
            return None
        snapshot = self._caches.snapshot(raw, now=rfc3339.stamp(self._wall_clock()))
        domain = snapshot.domain
        if domain.deleting and not domain.finalized:
            self._forget(uid)  # not ours to order any more; the collector takes leftovers
            return None
        now = self._clock()
        with self._lock:
            reported = self._reported.get(uid, frozenset())
            remembered = self._members.get(uid)
            due = self._next_flush.get(uid, now)
        plan = decide.plan(
            snapshot, limit=self._limit, reported=reported, flush=now >= due, remembered=remembered
        )
        self._log_decisions(snapshot, plan)
        raw = self._write_record(raw, domain, plan)
        with self._lock:
            self._reported[uid] = plan.reported
            if plan.status is not None:
                self._next_flush[uid] = now + STATUS_INTERVAL
                self._members[uid] = plan.members  # the full list behind the written one
        labels = self._labels.write(plan.labels)
        self._labels.report(domain, labels.refused)
        if plan.remove_finalizer:
            self._finalizer(raw, domain, present=False)
            self._forget(uid)
            log.info("domain %s/%s released", domain.namespace, domain.name)
        if labels.failed is not None:
            raise labels.failed  # may pass: retried with backoff; the rest of the round is done
        # A refused copy is not the round's failure: raised, its backoff (up to the queue's cap)
        # would replace the come-back of a status held back, and the status would wait for a
        # label that may never be written. The round comes back for both, whichever is first.
        later = [
            *([labelcopies.RETRY_SECONDS] if labels.lost else []),
            *([labelcopies.REFUSED_RETRY_SECONDS] if labels.refused else []),
            *([max(due - now, 0.0)] if plan.deferred else []),
        ]
        return min(later) if later else None

    def _write_record(
        self, raw: dict[str, Any], domain: Domain, plan: decide.Plan
    ) -> dict[str, Any]:
        """Carry out ``plan`` up to the status, in the order others wait on; the object now.

        The finalizer, the template, the cliques (the record) and their Events, then the status
        and its Events; the formation clock and the trace hear of what was written.
        """
        uid = domain.uid
        if plan.add_finalizer:
            raw = self._finalizer(raw, domain, present=True) or raw
        if plan.create_template:
            self._templates.create(domain)
        if plan.delete_template:
            self._templates.delete(domain)
        self._write_cliques(uid, plan.cliques, plan.clique_members)
        self._traced(trace.Stage.CLIQUE_WRITTEN, uid, plan.assigned)
        for event in plan.events:
            self._emit(domain, event)
        if plan.status is not None:
            raw = self._write_status(raw, domain, plan.status)
        # After the write they describe: a failed write recomputes them, none is doubled.
        for event in plan.status_events:
            self._emit(domain, event)
        self._formation.joined(uid, plan.assigned, domain_ready=plan.domain_ready)
        self._formation.ready(uid, plan.became_ready, domain_ready=plan.domain_ready)
        # Readiness goes out with the status: traced in the round that writes it.
        self._traced(trace.Stage.MEMBER_READY, uid, plan.announced_ready)
        return raw

    def _log_decisions(self, snapshot: Snapshot, plan: decide.Plan) -> None:
        """The round's membership and status decisions, at ``-v 1`` (:mod:`decisionlines`)."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        if plan.cliques_plan is not None:
            log.debug("%s", decisionlines.membership_plan(
                snapshot, plan.cliques_plan, limit=self._limit, writes=plan.cliques))  # fmt: skip
        if plan.desired is not None:
            log.debug("%s", decisionlines.status_decision(
                snapshot, plan.desired, written=plan.status is not None,
                released=plan.remove_finalizer))  # fmt: skip

    def _traced(self, stage: trace.Stage, uid: str, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            self._trace.stage(stage, domain=uid, node=node)

    def forget_all(self) -> None:
        """Forget what every domain's rounds remembered (a new leadership term begins)."""
        with self._lock:
            uids = {*self._reported, *self._members, *self._next_flush}
        uids |= self._labels.domains() | self._templates.domains()
        for uid in uids:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._reported.pop(uid, None)
            self._members.pop(uid, None)
            self._next_flush.pop(uid, None)
        self._labels.forget(uid)
        self._templates.forget(uid)
        self._formation.forget(uid)

    def _fence(self) -> None:
        """Raise :class:`writes.Fenced` unless this replica may still write."""
        if not self._may_write():
            raise writes.Fenced("this replica may no longer hold the leader lease")

    # -- the domain object ----------------------------------------------------------------

    def _finalizer(
        self, raw: dict[str, Any], domain: Domain, *, present: bool
    ) -> dict[str, Any] | None:
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

        path = resources.COMPUTE_DOMAINS.path(domain.name, namespace=domain.namespace)
        self._fence()
        try:
            updated = writes.read_modify_write(self._api, path, mutate, current=raw)
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND and not present:
                return None  # gone already
            raise
        if updated is not None and present:
            self._caches.written_domains.wrote(updated)
        return updated

    def _write_status(
        self, raw: dict[str, Any], domain: Domain, status: models.ComputeDomainStatusV1Beta2
    ) -> dict[str, Any]:
        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            obj["status"] = status.to_dict()
            return obj

        path = resources.COMPUTE_DOMAINS.path(domain.name, namespace=domain.namespace)
        self._fence()
        updated = writes.write_planned(self._api, path, mutate, current=raw, subresource="status")
        assert updated is not None  # mutate always changes something
        self._caches.written_domains.wrote(updated)
        return updated

    def _emit(self, domain: Domain, event: EventSpec) -> None:
        ref = events.ObjectRef(
            kind=constants.COMPUTE_DOMAIN_KIND, name=domain.name, namespace=domain.namespace,
            uid=domain.uid, api_version=constants.API_VERSION_V1BETA2,
        )  # fmt: skip
        self._fence()
        self._recorder.emit(ref, reason=event.reason, message=event.message, warning=event.warning)

    # -- cliques --------------------------------------------------------------------------

    def _write_cliques(
        self,
        uid: DomainUID,
        changes: Mapping[CliqueID, tuple[models.CliqueDaemon, ...]],
        members: Mapping[CliqueID, frozenset[str]],
    ) -> None:
        if not changes:
            return
        current = self._caches.cliques_of(uid)
        namespace = self._caches.namespace
        for clique, daemons in sorted(changes.items()):
            existing = current.get(clique)
            path = resources.CLIQUES.path(models.clique_name(uid, clique), namespace=namespace)
            self._fence()
            if not daemons:
                if existing is not None:
                    self._delete(path, existing)  # preconditioned: only the version planned from
                    self._caches.written_cliques.deleted(existing["metadata"]["uid"])
                continue
            listed = [d.to_dict() for d in daemons]
            named = members.get(clique, frozenset())
            if existing is None:
                body = objects.clique_object(
                    namespace=namespace, uid=uid, clique=clique, daemons=daemons, members=named
                )
                stored = self._create_clique(namespace, body)
            else:

                def mutate(
                    obj: dict[str, Any], listed: list[Any] = listed, named: frozenset[str] = named
                ) -> dict[str, Any]:
                    obj["daemons"] = listed
                    objects.name_members(obj, named)
                    return obj

                written = writes.write_planned(self._api, path, mutate, current=existing)
                assert written is not None
                stored = written
            self._caches.written_cliques.wrote(stored)

    def _create_clique(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a clique the snapshot lacks; one that exists after all makes the plan stale."""
        try:
            return self._api.create(resources.CLIQUES.path(namespace=namespace), body)
        except client.ApiError as exc:
            if exc.failure is client.Failure.CONFLICT:
                raise writes.Stale.from_conflict(exc) from exc
            raise

    # -- helpers --------------------------------------------------------------------------

    def _delete(self, path: str, existing: Mapping[str, Any]) -> None:
        try:
            self._api.delete(path, body=_delete_options(existing))
        except client.ApiError as exc:
            if exc.failure is client.Failure.CONFLICT:  # changed since we looked: the plan is stale
                raise writes.Stale.from_conflict(exc) from exc
            if exc.failure is not client.Failure.NOT_FOUND:
                raise
