"""The thin act step of a reconcile: carry out the plan :mod:`decide` made.

Order matters where others wait on us: the finalizer first (so a deletion can never skip the
clean-up), then the template, then the cliques (the membership record: agents and prepares wait
on it), Events, the status (people and the formation clock read it), and the node labels last:
they are only a copy of the record for the incumbent's tools, so up to one patch per member
must not delay what others wait for. Every update carries the resourceVersion it was computed
from, starting from the cache overlaid with our own latest writes, so a single writer never
meets a conflict. Any API error aborts the round: the work queue retries the domain with
backoff, and the next round recomputes everything from the caches. Two refusals do not: a
template the API refuses to create, and a label copy it refuses to write, are reported once
and tried again on their own, so the status goes on being written on time.

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

import concurrent.futures
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from computedomains import rfc3339, trace
from computedomains.api import constants, models, resources
from computedomains.api.domainview import Domain, DomainUID
from computedomains.controller import decide, nodelabels, objects
from computedomains.controller.caches import Caches
from computedomains.controller.eventplan import EventSpec, Reason
from computedomains.controller.metrics import FormationClock
from computedomains.controller.views import CliqueID
from computedomains.kube import client, events, nodes, workqueue, writes

log = logging.getLogger(__name__)
STATUS_INTERVAL = 2.0
"""Seconds between status writes of one domain (the incumbent syncs every 2 s too). Changes
in between are written together, with their Events; slot and address changes, which agents
wait for, are never held back. This is what bounds the writes of a formation whose nodes
arrive one by one."""


LABEL_RETRY_SECONDS = 1.0
"""A label write that found the label changed since the snapshot is planned again after this."""

LABEL_REFUSED_RETRY_SECONDS = workqueue.DEFAULT_MAX_DELAY
"""A label write the API refused (403, 422: an admission policy) is tried again after this: as
often as a failing round at the queue's cap, for the refusal does not pass by itself."""

LABEL_WRITERS = 6
"""Label copies written at once: a round's 18 Node patches take about three patches' time."""

_TAKEN = "taken"
"""Template trouble: a foreign object has the template's name."""


@dataclasses.dataclass(frozen=True)
class LabelOutcome:
    """What became of a round's label copies."""

    failed: Exception | None = None
    """The first failure that may pass (the API busy or unreachable): the round fails."""
    refused: Mapping[str, tuple[nodelabels.LabelWrite, Exception]] = dataclasses.field(
        default_factory=dict
    )
    """By node: the writes the API refused (it will again), and its answer."""
    lost: bool = False
    """A write found the label changed since the snapshot."""


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
        self._template_trouble: dict[str, str] = {}
        """Per domain, why its template could not be created (reported once):
        :data:`_TAKEN`, or the API's answer to the create."""
        self._label_refusals: dict[str, dict[str, str]] = {}
        """Per domain, the API's answer to each node's refused label write (reported once)."""

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
        if plan.add_finalizer:
            raw = self._finalizer(raw, present=True) or raw
        if plan.create_template:
            self._create_template(domain)
        if plan.delete_template:
            self._delete_template(domain)
        self._write_cliques(domain.uid, plan.cliques, plan.clique_members)
        self._traced(trace.Stage.CLIQUE_WRITTEN, uid, plan.assigned)
        for event in plan.events:
            self._emit(domain, event)
        if plan.status is not None:
            raw = self._write_status(raw, plan.status)
        # After the write they describe: a failed write recomputes them, none is doubled.
        for event in plan.status_events:
            self._emit(domain, event)
        self._formation.joined(uid, plan.assigned, domain_ready=plan.domain_ready)
        self._formation.ready(uid, plan.became_ready, domain_ready=plan.domain_ready)
        # Readiness goes out with the status: traced in the round that writes it.
        self._traced(trace.Stage.MEMBER_READY, uid, plan.announced_ready)
        with self._lock:
            self._reported[uid] = plan.reported
            if plan.status is not None:
                self._next_flush[uid] = now + STATUS_INTERVAL
                self._members[uid] = plan.members  # the full list behind the written one
        labels = self._write_labels(plan.labels)
        self._report_refusals(domain, labels.refused)
        if plan.remove_finalizer:
            self._finalizer(raw, present=False)
            self._forget(uid)
            log.info("domain %s/%s released", domain.namespace, domain.name)
        if labels.failed is not None:
            raise labels.failed  # may pass: retried with backoff; the rest of the round is done
        # A refused copy is not the round's failure: raised, its backoff (up to the queue's cap)
        # would replace the come-back of a status held back, and the status would wait for a
        # label that may never be written. The round comes back for both, whichever is first.
        later = [
            *([LABEL_RETRY_SECONDS] if labels.lost else []),
            *([LABEL_REFUSED_RETRY_SECONDS] if labels.refused else []),
            *([max(due - now, 0.0)] if plan.deferred else []),
        ]
        return min(later) if later else None

    def _traced(self, stage: trace.Stage, uid: str, nodes: tuple[str, ...]) -> None:
        for node in nodes:
            self._trace.stage(stage, domain=uid, node=node)

    def forget_all(self) -> None:
        """Forget what every domain's rounds remembered (a new leadership term begins)."""
        with self._lock:
            uids = {*self._reported, *self._members, *self._template_trouble,
                    *self._label_refusals, *self._next_flush}  # fmt: skip
        for uid in uids:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        with self._lock:
            self._reported.pop(uid, None)
            self._members.pop(uid, None)
            self._template_trouble.pop(uid, None)
            self._label_refusals.pop(uid, None)
            self._next_flush.pop(uid, None)
        self._formation.forget(uid)

    def _fence(self) -> None:
        """Raise :class:`writes.Fenced` unless this replica may still write."""
        if not self._may_write():
            raise writes.Fenced("this replica may no longer hold the leader lease")

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
        path = resources.COMPUTE_DOMAINS.path(meta["name"], namespace=meta["namespace"])
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
        self, raw: dict[str, Any], status: models.ComputeDomainStatusV1Beta2
    ) -> dict[str, Any]:
        def mutate(obj: dict[str, Any]) -> dict[str, Any]:
            obj["status"] = status.to_dict()
            return obj

        meta = raw["metadata"]
        path = resources.COMPUTE_DOMAINS.path(meta["name"], namespace=meta["namespace"])
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

    # -- the workload template ------------------------------------------------------------

    def _create_template(self, domain: Domain) -> None:
        path = resources.RESOURCE_CLAIM_TEMPLATES.path(domain.template, namespace=domain.namespace)
        with self._lock:
            known_conflict = self._template_trouble.get(domain.uid) == _TAKEN
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
            self._report_template_trouble(domain, str(exc), Reason.TEMPLATE_REJECTED,
                                          f"creating ResourceClaimTemplate {domain.namespace}/"
                                          f"{domain.template} was refused: {exc}")  # fmt: skip
            return
        with self._lock:
            self._template_trouble.pop(domain.uid, None)
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
        self._report_template_trouble(domain, _TAKEN, Reason.TEMPLATE_CONFLICT, message)

    def _report_template_trouble(
        self, domain: Domain, trouble: str, reason: Reason, message: str
    ) -> None:
        """A Warning Event, once per domain and trouble."""
        with self._lock:
            if self._template_trouble.get(domain.uid) == trouble:
                return
            self._template_trouble[domain.uid] = trouble
        log.warning("domain %s/%s: %s", domain.namespace, domain.name, message)
        self._emit(domain, EventSpec(reason, message, warning=True))

    def _delete_template(self, domain: Domain) -> None:
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

    # -- node labels ----------------------------------------------------------------------

    def _write_labels(self, labels: tuple[nodelabels.LabelWrite, ...]) -> LabelOutcome:
        """Write the label copies; what failed, was refused, or lost.

        A copy that cannot be written (an admission webhook refusing Node patches, say) must
        not hold up what others wait for: the status, Events and a deletion's release. A write
        that found the label changed since the snapshot (another domain's round took it away
        first) is planned again shortly. The writes go out side by side (each fenced on its
        own): the domain's next round waits for the slowest, not for their sum.
        """
        if not labels:
            return LabelOutcome()
        workers = min(len(labels), LABEL_WRITERS)
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="label") as pool:
            outcomes = list(pool.map(self._write_label, labels))
        refused: dict[str, tuple[nodelabels.LabelWrite, Exception]] = {
            w.node: (w, o)
            for w, o in zip(labels, outcomes, strict=True)
            if isinstance(o, client.ApiError) and o.failure is client.Failure.REFUSED
        }
        failed = next(
            (o for w, o in zip(labels, outcomes, strict=True)
             if isinstance(o, Exception) and w.node not in refused),
            None,
        )  # fmt: skip
        return LabelOutcome(failed, refused, any(o is False for o in outcomes))

    def _write_label(self, write: nodelabels.LabelWrite) -> bool | Exception:
        """One label copy: whether it was written, or the API failure that stopped it."""
        self._fence()
        try:
            done = nodes.set_label_if(
                self._api, write.node, constants.COMPUTE_DOMAIN_LABEL,
                expected=write.expected, value=write.value,
                resource_version=write.resource_version,
            )  # fmt: skip
        except client.API_ERRORS as exc:
            if client.failure(exc) is not client.Failure.REFUSED:  # a refusal: reported once
                log.warning("node %s: cannot write the domain label: %s", write.node, exc)
            return exc
        if done:
            was, now = write.expected or "-", write.value or "-"
            log.info("node %s: domain label %s -> %s", write.node, was, now)
            if write.value:
                self._trace.stage(trace.Stage.NODE_LABELED, domain=write.value, node=write.node)
        return done

    def _report_refusals(
        self, domain: Domain, refused: Mapping[str, tuple[nodelabels.LabelWrite, Exception]]
    ) -> None:
        """Log and record a Warning Event for each label refusal, once per node and answer.

        Each refused request is counted already (``api_requests_total`` by code). A node
        written, or no longer planned, is forgotten: a later refusal is reported again.
        """
        answers = {node: str(exc) for node, (_, exc) in refused.items()}
        with self._lock:
            before = self._label_refusals.get(domain.uid, {})
            if answers:
                self._label_refusals[domain.uid] = answers
            else:
                self._label_refusals.pop(domain.uid, None)
        for node, (write, exc) in sorted(refused.items()):
            if before.get(node) == answers[node]:
                continue
            change = (
                f"set its label {constants.COMPUTE_DOMAIN_LABEL}={write.value}"
                if write.value
                else f"remove its label {constants.COMPUTE_DOMAIN_LABEL}"
            )
            message = (
                f"node {node}: the API refused to {change}: {exc}. The label is only a copy "
                "of the membership record (the ComputeDomainClique objects), which is written; "
                f"the write is tried again every {LABEL_REFUSED_RETRY_SECONDS:g}s"
            )
            log.warning("domain %s/%s: %s", domain.namespace, domain.name, message)
            self._emit(domain, EventSpec(Reason.LABEL_REFUSED, message, warning=True))

    # -- helpers --------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self._api.get(path)
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND:
                return None
            raise

    def _delete(self, path: str, existing: Mapping[str, Any]) -> None:
        try:
            self._api.delete(path, body=_delete_options(existing))
        except client.ApiError as exc:
            if exc.failure is client.Failure.CONFLICT:  # changed since we looked: the plan is stale
                raise writes.Stale.from_conflict(exc) from exc
            if exc.failure is not client.Failure.NOT_FOUND:
                raise
