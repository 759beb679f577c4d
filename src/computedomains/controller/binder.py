"""The thin act step of placement: answer the binding conditions :mod:`freenodes` decides.

One node at a time (its work-queue key), on the leader only. Answers go to the claim's
``status.devices``; the scheduler, waiting in PreBind, then binds the pod or places it again.

An answer is never changed: the binder remembers what it answered until its caches show it,
so a second round that runs before the watch caught up answers the same way.

Without binding conditions (Kubernetes before 1.36, or switched off) two domains' first pods
can take the same free node in the same moment; the controller records the first
(``placement.holder``) and the plugin refuses the other for as long as the first holds the node.
The binder then deletes the stranded pod when a
workload controller owns it (which creates it again, and the scheduler now sees the hold), and
tells the owner of a bare pod why it waits (docs/placement.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from computedomains import rfc3339, trace
from computedomains.api import placement, resources
from computedomains.api.domainview import Domain
from computedomains.controller import claimcheck, decisionlines, freenodes
from computedomains.controller.caches import Caches
from computedomains.kube import client, events, resourceclaims, workqueue, writes

log = logging.getLogger(__name__)


def _key(allocation: placement.ChannelAllocation) -> tuple[str, str, tuple[str, ...], str]:
    """One allocation of one claim (a claim refused a node is allocated again later)."""
    return (allocation.uid, allocation.node, allocation.devices, allocation.allocated_at)


TOLD_REMEMBERED = 10_000
"""Claims (and their pods) remembered as told: enough for any burst of bad claims."""

_SPELLINGS = ((",", ":"), (", ", ": "))
"""JSON separators of the clients that write claims: Go's (kubectl), then Python's default."""


def _allocation_respelled(exc: client.ApiError) -> bool:
    """The update was refused because its allocation's bytes differ from those stored."""
    return exc.status == 422 and "status.allocation" in exc.message


def _now() -> str:
    return rfc3339.stamp()


def _named(domains: Iterable[Domain]) -> dict[str, str]:
    """How answers name each live (not deleting) domain, by UID (``freenodes.decide``)."""
    return {d.uid: f"ComputeDomain {d.key}" for d in domains if not d.deleting}


class Binder:
    """Answers claims allocated on free nodes, node by node."""

    def __init__(
        self,
        api: client.Client,
        caches: Caches,
        *,
        recorder: events.Emitter,
        may_write: Callable[[], bool] = lambda: True,
        observe: Callable[[bool], None] = lambda granted: None,
        settling: Callable[[], float] = lambda: 0.0,
        now: Callable[[], str] = _now,
    ) -> None:
        self._api = api
        self._caches = caches
        self._recorder = recorder
        self._may_write = may_write
        self._observe = observe
        self._settling = settling
        self._now = now
        self._queue = workqueue.WorkQueue()
        self._lock = threading.Lock()
        self._answered: dict[tuple[str, str, tuple[str, ...], str], bool] = {}
        """Allocation → granted, for answers the caches may not show yet."""
        self._told: set[tuple[str, str]] = set()
        """(claim UID, target UID) of the claims told they can never be prepared."""
        self._thread: threading.Thread | None = None
        self._trace = trace.Tracer("controller")

    def node_changed(self, node: str) -> None:
        """A claim on ``node`` changed: decide the node again (no-op while not leading)."""
        if self._thread is not None:
            self._queue.add(node)

    def claim_changed(self, claim: dict[str, Any]) -> None:
        """Tell a channel claim (and its pods) now if it can never be prepared.

        No-op while not leading; each target is told once.
        """
        if self._thread is None:
            return
        problem = claimcheck.check(claim, namespace_of=self._caches.namespace_of)
        if problem is None:
            return
        claim_uid = str(claim["metadata"].get("uid", ""))
        for target in claimcheck.audience(claim):
            with self._lock:
                if (claim_uid, target.uid) in self._told:
                    continue
                if len(self._told) >= TOLD_REMEMBERED:
                    self._told.clear()  # at worst a claim is told twice
                self._told.add((claim_uid, target.uid))
            self._recorder.emit(target, reason=problem.reason, message=problem.message,
                                warning=True)  # fmt: skip

    def start(self) -> None:
        """Answer whatever waits, then keep answering (on becoming leader)."""
        with self._lock:
            self._answered = {}  # another leader may have answered since an earlier term
            self._told = set()  # and what it told at the end of that term was not written
        self._queue = workqueue.WorkQueue()
        self._thread = threading.Thread(target=self._work, name="binder", daemon=True)
        self._thread.start()
        for node in {a.node for a in self._pending()}:
            self._queue.add(node)
        for claim in self._caches.claims.items():
            self.claim_changed(claim)

    def stop(self) -> None:
        """Stop answering (on losing leadership or shutting down); :meth:`join` waits."""
        self._queue.shutdown()

    def join(self, timeout: float) -> bool:
        """Wait (bounded) for the node being answered after :meth:`stop`; whether it ended."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                log.error("binder still busy after %.0fs", timeout)
                return False
        return True

    def _work(self) -> None:
        queue = self._queue
        while (node := queue.get()) is not None:
            try:
                self.bind(node)
                queue.forget(node)
            except Exception as exc:  # noqa: BLE001 - any failure is retried with backoff
                delay = queue.add_rate_limited(node)
                log.warning("placement on node %s failed, retrying in %.1fs: %s", node, delay, exc)
            finally:
                queue.done(node)

    def bind(self, node: str) -> None:
        """Answer every pending claim on ``node``."""
        allocations = self._overlay(self._caches.allocations(node=node))
        recorded = self._caches.recorded(node)
        foreign = self._overlay(self._caches.allocations(node=node, foreign=True))
        answers = freenodes.decide(
            node=node, recorded=recorded, allocations=allocations,
            domains=_named(self._caches.domain_views()), foreign=foreign,
        )  # fmt: skip
        holder = placement.holder(recorded=recorded, allocations=allocations)
        wait = self._settling()
        held = wait > 0 and not recorded and any(a.granted for a in answers)
        if answers and log.isEnabledFor(logging.DEBUG):
            log.debug("%s", decisionlines.free_node(
                node=node, recorded=recorded, holder=holder, allocations=allocations,
                foreign=foreign, answers=answers, held_for=wait if held else 0.0,
            ))  # fmt: skip
        if held:
            # A turn just ended: a claim allocated on its taint may still be on its way here
            # and would hold this node (turns.SETTLE). The scheduler polls every 5 s anyway.
            self._queue.add_after(node, wait)
            return
        refused: list[client.ApiError] = []
        for answer in answers:
            try:
                self._answer(answer)
            except client.ApiError as exc:
                if exc.failure is not client.Failure.REFUSED:
                    raise
                # One claim the API will not take an answer for must not hold up the others
                # on the node (their pods wait in PreBind): the node is tried again after.
                claim = answer.allocation
                log.warning("claim %s/%s on node %s: answer refused: %s", claim.namespace,
                            claim.name, node, exc)  # fmt: skip
                refused.append(exc)
        for allocation in allocations:
            if placement.stranded(allocation, holder=holder):
                named = self._name_for(holder, allocation.namespace)
                for pod in allocation.pods:
                    self._unstrand(allocation, pod, holder=named)
        if refused:
            raise refused[0]

    def _name_for(self, uid: str, namespace: str) -> str:
        """How an Event in ``namespace`` names domain ``uid``: never one of another tenant."""
        domain = self._caches.domain_view(uid)
        if domain is None or domain.namespace != namespace:
            return "another ComputeDomain"
        return f"ComputeDomain {domain.key}"

    def _pending(self) -> list[placement.ChannelAllocation]:
        """Every allocation waiting for an answer, those of foreign claims included."""
        every = self._caches.allocations() + self._caches.allocations(foreign=True)
        return [a for a in every if a.pending]

    def _overlay(
        self, allocations: list[placement.ChannelAllocation]
    ) -> list[placement.ChannelAllocation]:
        """The cached allocations with this binder's answers the caches do not show yet."""
        with self._lock:
            pending = {_key(a) for a in self._pending()}
            # Forget answers the caches show now, or whose allocation is gone.
            self._answered = {k: g for k, g in self._answered.items() if k in pending}
            answered = dict(self._answered)
        return [
            dataclasses.replace(a, pending=False, granted=answered[_key(a)],
                                refused=not answered[_key(a)])
            if _key(a) in answered else a
            for a in allocations
        ]  # fmt: skip

    def _fence(self) -> None:
        if not self._may_write():
            raise writes.Fenced("not answering: this replica may no longer hold the lease")

    def _answer(self, answer: freenodes.Answer) -> None:
        """Write one answer into the claim's device status, unless the claim moved on.

        A full status update with the resourceVersion just read, as the scheduler writes it
        (an apply would re-assert the immutable allocation); a conflict retries the node.
        """
        claim = answer.allocation
        traced = {"domain": claim.domain_uid, "node": claim.node, "claim": claim.uid}
        self._trace.stage(trace.Stage.CLAIM_ALLOCATED, **traced)
        path = resourceclaims.path(claim.namespace, claim.name)
        try:
            current = self._api.get(path)
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND:
                return  # the claim is gone: nothing waits for the answer
            raise
        now = placement.parse_claim(current)
        if now is None or _key(now) != _key(claim) or not now.pending:
            return  # deallocated, placed again, or answered: the next round sees it
        current["status"] = placement.answered_status(
            current.get("status") or {},
            claim,
            granted=answer.granted,
            reason=answer.reason,
            message=answer.message,
            now=self._now(),
        )
        self._replace_status(path, current)
        with self._lock:
            self._answered[_key(claim)] = answer.granted
        self._observe(answer.granted)
        if answer.granted:
            self._trace.stage(trace.Stage.NODE_RESERVED, **traced)
        log.info(
            "claim %s/%s on node %s: %s (%s)",
            claim.namespace,
            claim.name,
            claim.node,
            "reserved" if answer.granted else "refused",
            answer.message,
        )

    def _replace_status(self, path: str, claim: dict[str, Any]) -> None:
        """Send ``claim`` back with its allocation spelled as it was stored.

        The API server compares the allocation byte for byte (its opaque parameters are raw
        JSON) and refuses any change to it, but a read gives them compacted: a claim written
        with Python's spacing (the kubernetes client, this project before 0.2.1) must be sent
        back with it, and any other (kubectl, Go clients) compact.
        """
        for separators in _SPELLINGS:
            self._fence()
            try:
                self._api.replace(f"{path}/status", client.encode(claim, separators=separators))
                return
            except client.ApiError as exc:
                if separators == _SPELLINGS[-1] or not _allocation_respelled(exc):
                    raise
                log.debug("%s: allocation stored with another spelling, trying %r", path,
                          _SPELLINGS[-1])  # fmt: skip

    def _unstrand(
        self, allocation: placement.ChannelAllocation, pod: tuple[str, str], *, holder: str
    ) -> None:
        """Have a pod stranded on a node another domain took recreated, or say why it waits."""
        name, uid = pod
        path = resources.PODS.path(name, namespace=allocation.namespace)
        try:
            current = self._api.get(path)
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND:
                return
            raise
        meta, status = current.get("metadata", {}), current.get("status", {})
        if meta.get("uid") != uid or meta.get("deletionTimestamp"):
            return
        if status.get("phase") != "Pending":
            return  # it runs (its prepare came first): never deleted under its workload
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        where = f"node {allocation.node} went to {holder} in the same moment"
        if owner is None:
            outcome = (
                "this pod waits until that domain leaves the node "
                "(delete it to have it placed elsewhere)"
            )
        else:
            options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
            self._fence()
            try:
                self._api.delete(path, body=options)
            except client.ApiError as exc:
                if exc.failure in (client.Failure.NOT_FOUND, client.Failure.CONFLICT):
                    return
                raise
            log.info("pod %s/%s stranded on node %s: deleted", allocation.namespace, name,
                     allocation.node)  # fmt: skip
            outcome = (
                f"deleted so that {owner.get('kind')} {owner.get('name')} creates it again "
                "on a node the scheduler now sees as free"
            )
        self._recorder.emit(
            events.ObjectRef("Pod", name, allocation.namespace, uid),
            reason=placement.RefusalReason.NODE_IN_ANOTHER_DOMAIN,
            message=f"{where}; {outcome}",
            warning=True,
        )
