"""Prepare one claim: check it, record it, wait for IMEX, write its CDI spec.

The node is the domain's when the controller's membership record says so (the clique objects,
``placement.recorded_holder``); prepare never decides it. It refuses a claim while the record
names another domain, or while claims of another domain are prepared here, and otherwise waits
for the node's IMEX agent to report the domain READY, which the agent does only once the
record names the node for the domain.

Every step is idempotent, so a kubelet retry or a plugin restart half-way simply redoes it.
The ledger is read and changed under its lock; everything that waits (the API server, IMEX)
happens outside it, so claims prepare concurrently. A prepare ends with a commit that looks
again at the claim's entry: one unprepared, collected or deleted while it waited hands out
nothing and leaves no spec behind (``ledger.decide_commit``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

from computedomains import trace
from computedomains.api import domainview, fabricverdict
from computedomains.kube import client as kube_client
from computedomains.kube import resourceclaims
from computedomains.kubeletplugin import (
    cdi,
    checkpoint,
    claims,
    config,
    devices,
    domainlookup,
    errors,
    imexwait,
    ledger,
    procinfo,
    validate,
)

log = logging.getLogger(__name__)
CLAIM_CHECK_SECONDS = 5.0
"""How often a prepare waiting for IMEX makes sure its claim still exists (one GET: every
waiting claim of a forming domain asks, so not every second)."""

FabricReader = Callable[[], fabricverdict.NodeFabric]


class Preparer:
    """Prepares claims on this node (one instance, called from many gRPC threads)."""

    def __init__(
        self,
        cfg: config.PluginConfig,
        *,
        api: kube_client.Client,
        book: ledger.Ledger,
        domains: domainlookup.DomainLookup,
        fabric: FabricReader,
        recorded: Callable[[], str] = lambda: "",
    ) -> None:
        """``recorded``: the domain the membership record names for the node ("" none)."""
        self._cfg = cfg
        self._api = api
        self._book = book
        self._recorded = recorded
        self._domains = domains
        self._fabric = fabric
        self._trace = trace.Tracer("kubelet-plugin")

    def prepare(
        self, ref: claims.ClaimRef, *, deadline: float
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        """The claim's devices; raises :class:`errors.PrepareError` or an API error.

        An unexpected exception becomes a Permanent ``InternalError`` of this claim alone
        (its traceback logged), never a failure of the kubelet's whole batch.
        """
        view: claims.ClaimView | None = None
        try:
            done = self._book.entry(ref.uid)
            if done is not None and done.state is checkpoint.ClaimState.COMPLETED:
                return done.devices  # the kubelet re-sends after its own restart
            read_at = self._book.now()
            view = self._read_claim(ref)
            return self._prepare(view, deadline=deadline, read_at=read_at)
        except errors.PrepareError as exc:
            exc.pods = view.reserved_for if view is not None else ()
            raise
        except kube_client.API_ERRORS:
            raise
        except Exception as exc:
            log.exception("prepare of %s/%s failed unexpectedly", ref.namespace, ref.name)
            failure = errors.Permanent(
                "InternalError",
                f"preparing claim {ref.namespace}/{ref.name} failed unexpectedly "
                f"({type(exc).__name__}: {exc}); the kubelet plugin's log has the details",
            )
            failure.pods = view.reserved_for if view is not None else ()
            raise failure from exc

    def _prepare(
        self, view: claims.ClaimView, *, deadline: float, read_at: float
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        fabric = self._fabric()
        plan = self._admit(view, fabric, read_at=read_at)
        node, claim = self._cfg.node_name, view.uid
        self._trace.stage(
            trace.Stage.PREPARE_CALLED, domain=plan.domain_uid, node=node, claim=claim
        )
        waited = False
        if plan.device_type is devices.DeviceType.CHANNEL and fabric.has_fabric:
            waited = imexwait.wait_ready(
                plan,
                status_file=self._cfg.imex_status_file,
                node_name=self._cfg.node_name,
                until=min(deadline, time.monotonic() + self._cfg.imex_ready_timeout),
                max_age=self._cfg.imex_status_max_age,
                check=self._wait_check(view, plan),
            )
        prepared = self._write_cdi(view, plan, fabric)
        # After a wait, make sure the claim was not deleted meanwhile.
        present = not waited or not self._claim_gone(view)
        outcome, entry = self._book.commit(
            view.uid, allocation=view.allocation_digest, devices=prepared, claim_present=present
        )
        if outcome is ledger.Commit.COMPLETE:
            self._trace.stage(
                trace.Stage.PREPARE_RETURNED, domain=plan.domain_uid, node=node, claim=claim
            )
            return prepared
        if outcome is ledger.Commit.ALREADY_COMPLETE:
            assert entry is not None
            return entry.devices
        raise _abandoned(view, gone=outcome is ledger.Commit.CLAIM_GONE)

    def _admit(
        self, view: claims.ClaimView, fabric: fabricverdict.NodeFabric, *, read_at: float
    ) -> validate.Plan:
        """The prepare decision: the claim's plan, with the node taken for its domain.

        Raises the refusal (:class:`errors.Permanent`) or the "retry later"
        (:class:`errors.Retryable`); logs the decision and what it was made from at DEBUG.
        """
        plan: validate.Plan | None = None
        recorded, other, decided = "", None, "none"
        try:
            plan = validate.plan(
                view,
                fabric=fabric,
                domain_of=self._domains.in_namespace(view.namespace),
                driver_namespace=self._cfg.namespace,
            )
            if plan.device_type is devices.DeviceType.CHANNEL:
                recorded = self._recorded()
            other = recorded if recorded and recorded != plan.domain_uid else None
            other = other or self._start(view, plan, read_at=read_at)
            if other is not None:
                raise validate.node_busy(plan, other, domain_of=self._for_messages(view.namespace))
            decided = "prepare"
            return plan
        except errors.PrepareError as exc:
            decided = f"{'retry' if exc.retryable else 'refuse'} ({exc.reason}: {exc.message})"
            raise
        except Exception as exc:
            decided = f"none ({type(exc).__name__} before deciding)"
            raise
        finally:
            log.debug(
                "prepare decision for claim %s/%s (%s) on node %s: %s; %s, devices %s, "
                "fabric %s (clique %s), recorded holder %s, other holder %s",
                view.namespace, view.name, view.uid, self._cfg.node_name, decided,
                plan.domain_label if plan is not None else "domain not resolved",
                ",".join(d.device for d in view.devices), fabric.verdict, fabric.clique or "-",
                recorded or "none", other or "none",
            )  # fmt: skip

    def _start(self, view: claims.ClaimView, plan: validate.Plan, *, read_at: float) -> str | None:
        """Record the claim as started in the ledger; returns the other domain holding the node."""
        started = checkpoint.ClaimEntry(
            uid=view.uid,
            namespace=view.namespace,
            name=view.name,
            state=checkpoint.ClaimState.STARTED,
            domain_uid=plan.domain_uid,
            device_type=plan.device_type,
            allocation=view.allocation_digest,
        )
        try:
            return self._book.start(started, read_at=read_at)
        except ledger.Unprepared:
            raise _abandoned(view, gone=False) from None

    def _read_claim(self, ref: claims.ClaimRef) -> claims.ClaimView:
        # A GET, as the plugin watches no claims (a cluster-wide watch on every node would grow
        # the API server's work with nodes times claims): from the API server's watch cache,
        # and from etcd only when the cached copy is not yet the one the kubelet asks about
        # (this UID, allocated to this node).
        claim = self._get_claim(ref.namespace, ref.name, cached=True)
        if (
            claim is None
            or claim["metadata"]["uid"] != ref.uid
            or not claims.allocated_to(claim, self._cfg.node_name)
        ):
            claim = self._get_claim(ref.namespace, ref.name)
        if claim is None:
            raise errors.Permanent(
                "ClaimNotFound",
                f"ResourceClaim {ref.namespace}/{ref.name} does not exist "
                "(deleted before it was prepared?)",
            )
        # An unprepare since the claim was read is the ledger's to catch (Ledger.start, by
        # time): a new pod's prepare of the same allocation after it is a prepare like any.
        return claims.view(claim, expected_uid=ref.uid)

    def _wait_check(self, view: claims.ClaimView, plan: validate.Plan) -> Callable[[], None]:
        """Run by the IMEX wait before each poll: stop waiting for a claim nobody wants now.

        Nor for a node the record gives another domain meanwhile (two domains' claims took
        it at once, binding conditions off): the controller's choice stands, and this claim's
        entry goes, so the other domain's prepare is not refused on its account.
        """
        next_look = time.monotonic() + CLAIM_CHECK_SECONDS

        def check() -> None:
            nonlocal next_look
            entry = self._book.entry(view.uid)
            if entry is None or entry.state is not checkpoint.ClaimState.STARTED:
                # Unprepare marks a waiting entry aborted; only a collection round that found
                # the claim deleted drops it.
                raise _abandoned(view, gone=entry is None)
            recorded = self._recorded()
            if recorded and recorded != plan.domain_uid:
                self._book.forget([view.uid])
                raise validate.node_busy(
                    plan, recorded, domain_of=self._for_messages(view.namespace)
                )
            if time.monotonic() < next_look:
                return
            next_look = time.monotonic() + CLAIM_CHECK_SECONDS
            try:
                gone = self._claim_gone(view)
            except kube_client.API_ERRORS as exc:  # a busy API server must not end the wait
                log.warning("cannot check claim %s/%s: %s", view.namespace, view.name, exc)
                return
            if gone:
                self._book.forget([view.uid])
                raise _abandoned(view, gone=True)

        return check

    def _claim_gone(self, view: claims.ClaimView) -> bool:
        """Whether the claim was deleted or replaced (a new object with another UID)."""
        found = self._get_claim(view.namespace, view.name)
        return found is None or found["metadata"]["uid"] != view.uid

    def _get_claim(
        self, namespace: str, name: str, *, cached: bool = False
    ) -> dict[str, Any] | None:
        found = resourceclaims.read(self._api, namespace, name, cached=cached)
        return cast(dict[str, Any] | None, found)

    def _for_messages(self, namespace: str) -> validate.DomainLookup:
        """A domain lookup that only names a domain in a message to a tenant of ``namespace``.

        Finds domains of that namespace only (another tenant's is never named); an API error
        finds none.
        """

        def lookup(uid: str) -> domainview.Domain | None:
            try:
                found = self._domains.find(uid, namespace)
            except kube_client.API_ERRORS:
                return None
            return found if found is not None and found.namespace == namespace else None

        return lookup

    def _write_cdi(
        self, view: claims.ClaimView, plan: validate.Plan, fabric: fabricverdict.NodeFabric
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        edits = procinfo.edits_for(plan, fabric=fabric, cfg=self._cfg)
        prepared = []
        for device in view.devices:
            ids: tuple[str, ...] = ()
            if not edits.empty():
                ids = (cdi.device_id(view.uid, device.device),)
            prepared.append(
                checkpoint.PreparedDevice((device.request,), device.pool, device.device, ids)
            )
        if not edits.empty():
            info = cdi.SpecInfo(
                claim_uid=view.uid,
                namespace=view.namespace,
                name=view.name,
                domain_uid=plan.domain_uid,
                device_type=plan.device_type,
            )
            document = cdi.spec(info=info, devices={d.device: edits for d in view.devices})
            cdi.write(self._cfg.cdi_root, view.uid, document)
        return tuple(prepared)


def _abandoned(view: claims.ClaimView, *, gone: bool) -> errors.Permanent:
    where = f"ResourceClaim {view.namespace}/{view.name}"
    if gone:
        return errors.Permanent(
            "ClaimDeleted",
            f"{where} was deleted (or replaced) while it was being prepared; "
            "nothing was handed out",
        )
    return errors.Permanent(
        "PrepareAborted",
        f"{where} was unprepared while it was being prepared; nothing was handed out",
    )
