"""Prepare and unprepare claims: the plugin's core, between the gRPC layer and the node.

Locking: one in-process lock guards the checkpoint and the decision "which domain holds this
node"; it is never held across an API call's wait for IMEX, so claims prepare concurrently.
Every step is idempotent, so a kubelet retry or a plugin restart half-way simply redoes it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from computedomains.api import constants
from computedomains.kube import client as kube_client
from computedomains.kube import events
from computedomains.kube import nodes as kube_nodes
from computedomains.kube.informer import Informer
from computedomains.kubeletplugin import (
    cdi,
    checkpoint,
    claims,
    config,
    devices,
    errors,
    metrics,
    nodestate,
    procinfo,
    validate,
)

log = logging.getLogger(__name__)
COMPONENT = "compute-domains-kubelet-plugin"
ABORTED_TTL = 90.0
"""Seconds an aborted claim is remembered: two kubelet call timeouts."""


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    uid: str
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class Result:
    """Per-claim outcome: devices, or an error for the kubelet."""

    devices: tuple[checkpoint.PreparedDevice, ...] = ()
    error: str = ""


class Driver:
    """Owns the node's claims, checkpoint, CDI specs and ``computeDomain`` label."""

    def __init__(
        self,
        cfg: config.PluginConfig,
        *,
        api: kube_client.Client,
        stats: metrics.PluginMetrics,
        recorder: events.Recorder,
        domains: Informer,
        claims_cache: Informer | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.api = api
        self.stats = stats
        self.recorder = recorder
        self.domains = domains
        self.claims_cache = claims_cache
        self.clock = clock
        self._lock = threading.Lock()
        self._checkpoint = checkpoint.Checkpoint(boot_id="")
        self._node_domain: str | None = None

    # -- start-up -------------------------------------------------------------------------

    def load(self) -> None:
        """Load the checkpoint (Event on the Node when it was corrupt or from another boot)."""
        boot_id = procinfo.boot_id(self.cfg.proc_root)
        loaded = checkpoint.load(self.cfg.checkpoint_file, boot_id=boot_id)
        for stale in loaded.discarded:
            cdi.remove(self.cfg.cdi_root, stale.uid)
        self._checkpoint = loaded.checkpoint
        if loaded.outcome in (checkpoint.LoadOutcome.CORRUPT, checkpoint.LoadOutcome.REBOOTED):
            checkpoint.save(self.cfg.checkpoint_file, self._checkpoint)
            self._node_event(loaded.outcome.value, loaded.detail, warning=True)
        log.info("checkpoint: %s (%s)", loaded.outcome.value, loaded.detail)
        node = self.api.get(kube_nodes.path(self.cfg.node_name))
        self._node_domain = node["metadata"].get("labels", {}).get(constants.COMPUTE_DOMAIN_LABEL)
        self.stats.track(self.prepared_counts)

    def prepared_counts(self) -> dict[str, int]:
        """Completed claims by device type (read at scrape time)."""
        with self._lock:
            counts = {"channel": 0, "daemon": 0}
            for entry in self._checkpoint.claims.values():
                if entry.state is checkpoint.ClaimState.COMPLETED:
                    counts[entry.device_type] = counts.get(entry.device_type, 0) + len(
                        entry.devices
                    )
            return counts

    # -- prepare --------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef, *, deadline: float) -> Result:
        """Prepare one claim; never raises (errors become the claim's result)."""
        try:
            return Result(devices=self._prepare(ref, deadline=deadline))
        except errors.PrepareError as exc:
            self.stats.error("prepare", exc.reason)
            self._claim_event(ref, exc)
            return Result(error=exc.message)
        except kube_client.API_ERRORS as exc:
            self.stats.error("prepare", "Internal")
            log.exception("prepare of %s/%s failed", ref.namespace, ref.name)
            return Result(error=f"preparing {ref.namespace}/{ref.name} failed: {exc}; will retry")

    def _prepare(self, ref: ClaimRef, *, deadline: float) -> tuple[checkpoint.PreparedDevice, ...]:
        with self._lock:
            entry = self._checkpoint.claims.get(ref.uid)
            if entry is not None and entry.state is checkpoint.ClaimState.COMPLETED:
                return entry.devices  # the kubelet re-sends after its own restart
        view = self._read_claim(ref)
        try:
            fabric = nodestate.read_fabric(self.cfg.fabric_verdict_file)
            plan = validate.plan(view, fabric=fabric, domain_of=self._domain)
            with self._lock:
                validate.check_node(plan, self._checkpoint, self._domain)
                # On disk only before the node itself changes (its label): anything else a
                # crash leaves behind (a CDI spec named by the claim UID) is found without it.
                joins = (
                    plan.device_type is devices.DeviceType.CHANNEL
                    and self._node_domain != plan.domain_uid
                )
                self._record(view, plan, checkpoint.ClaimState.STARTED, persist=joins)
            if plan.device_type is devices.DeviceType.CHANNEL:
                self._label_node(plan.domain_uid)
                if fabric.has_fabric:
                    self._wait_imex_ready(plan, deadline=deadline)
            prepared = self._write_cdi(view, plan, fabric)
        except errors.PrepareError as exc:
            exc.pods = view.reserved_for
            raise
        with self._lock:
            self._record(view, plan, checkpoint.ClaimState.COMPLETED, prepared)
        return prepared

    def _read_claim(self, ref: ClaimRef) -> claims.ClaimView:
        cached = self.claims_cache.by_uid(ref.uid) if self.claims_cache is not None else None
        if cached is not None and self._allocated_here(cached):
            # The watch saw this claim allocated to this node: that is what the kubelet asks
            # about, and it saves an API round trip on the hot path.
            claim = cached
        else:
            claim = self._get_claim(ref)
        view = claims.view(claim, expected_uid=ref.uid)
        with self._lock:
            entry = self._checkpoint.claims.get(ref.uid)
            stale = (
                entry is not None
                and entry.state is checkpoint.ClaimState.ABORTED
                and entry.allocation == view.allocation_digest
            )
        if stale:
            raise errors.Permanent(
                "StalePrepare",
                f"claim {ref.namespace}/{ref.name} was unprepared while it was being prepared; "
                "not re-taking its devices",
            )
        return view

    def _allocated_here(self, claim: dict[str, Any]) -> bool:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = allocation.get("devices", {}).get("results", [])
        ours = [r for r in results if r.get("driver") == constants.DRIVER_NAME]
        return bool(ours) and all(r.get("pool") == self.cfg.node_name for r in ours)

    def _get_claim(self, ref: ClaimRef) -> dict[str, Any]:
        path = f"/apis/resource.k8s.io/v1/namespaces/{ref.namespace}/resourceclaims/{ref.name}"
        try:
            return self.api.get(path, timeout=10)
        except kube_client.ApiError as exc:
            if exc.status == kube_client.NOT_FOUND:
                raise errors.Permanent(
                    "ClaimNotFound",
                    f"ResourceClaim {ref.namespace}/{ref.name} does not exist "
                    "(deleted before it was prepared?)",
                ) from None
            raise

    def _domain(self, uid: str) -> dict[str, Any] | None:
        found = self.domains.by_uid(uid)
        if found is None:
            self.domains.refresh()  # the watch may lag behind a domain created a moment ago
            found = self.domains.by_uid(uid)
        return found

    def _record(
        self,
        view: claims.ClaimView,
        plan: validate.Plan,
        state: checkpoint.ClaimState,
        prepared: tuple[checkpoint.PreparedDevice, ...] = (),
        *,
        persist: bool = True,
    ) -> None:
        self._checkpoint.claims[view.uid] = checkpoint.ClaimEntry(
            uid=view.uid,
            namespace=view.namespace,
            name=view.name,
            state=state,
            domain_uid=plan.domain_uid,
            device_type=plan.device_type.value,
            allocation=view.allocation_digest,
            devices=prepared,
        )
        if persist:
            checkpoint.save(self.cfg.checkpoint_file, self._checkpoint)

    def _label_node(self, domain_uid: str) -> None:
        if self._node_domain == domain_uid:
            return
        kube_nodes.patch_labels(
            self.api, self.cfg.node_name, {constants.COMPUTE_DOMAIN_LABEL: domain_uid}
        )
        self._node_domain = domain_uid

    def _wait_imex_ready(self, plan: validate.Plan, *, deadline: float) -> None:
        """Wait (bounded by the kubelet's call and our timeout) for this node's IMEX domain."""
        until = min(deadline, time.monotonic() + self.cfg.imex_ready_timeout)
        status = nodestate.read_imex(self.cfg.imex_status_file)
        while status is None or not status.ready_for(plan.domain_uid):
            if time.monotonic() >= until:
                seen = (
                    "no IMEX status yet"
                    if status is None
                    else (
                        f"IMEX is {status.state} for domain {status.domain_uid or '-'}"
                        + (f": {status.message}" if status.message else "")
                    )
                )
                raise errors.Retryable(
                    "ImexNotReady",
                    f"{plan.domain_label} is not ready on node "
                    f"{self.cfg.node_name} yet ({seen}); the kubelet will retry",
                )
            time.sleep(0.02)  # a file poll: the agent writes it, nothing can notify us
            status = nodestate.read_imex(self.cfg.imex_status_file)

    def _write_cdi(
        self, view: claims.ClaimView, plan: validate.Plan, fabric: nodestate.Fabric
    ) -> tuple[checkpoint.PreparedDevice, ...]:
        edits = procinfo.edits_for(plan, fabric=fabric, cfg=self.cfg)
        prepared = []
        for device in view.devices:
            ids: tuple[str, ...] = ()
            if not edits.empty():
                ids = (cdi.device_id(view.uid, device.device),)
            prepared.append(
                checkpoint.PreparedDevice((device.request,), device.pool, device.device, ids)
            )
        if not edits.empty():
            info = {
                "claim-uid": view.uid,
                "claim": f"{view.namespace}/{view.name}",
                "domain-uid": plan.domain_uid,
                "device-type": plan.device_type.value,
            }
            document = cdi.spec(
                claim_uid=view.uid, info=info, devices={d.device: edits for d in view.devices}
            )
            cdi.write(self.cfg.cdi_root, view.uid, document)
        return tuple(prepared)

    # -- unprepare ------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> Result:
        """Undo a prepare; unknown claims succeed (the claim object may be long gone)."""
        try:
            self._unprepare(ref.uid)
        except kube_client.API_ERRORS as exc:
            self.stats.error("unprepare", "Internal")
            log.exception("unprepare of %s/%s failed", ref.namespace, ref.name)
            return Result(error=f"unpreparing {ref.namespace}/{ref.name} failed: {exc}; will retry")
        return Result()

    def _unprepare(self, uid: str) -> None:
        with self._lock:
            entry = self._checkpoint.claims.get(uid)
            cdi.remove(self.cfg.cdi_root, uid)  # also for unknown claims: a crash may have left it
            if entry is None or entry.state is checkpoint.ClaimState.ABORTED:
                return
            if entry.state is checkpoint.ClaimState.STARTED:
                self._checkpoint.claims[uid] = dataclasses.replace(
                    entry, state=checkpoint.ClaimState.ABORTED, devices=(), aborted_at=self.clock()
                )
            else:
                del self._checkpoint.claims[uid]
            still_held = any(
                e.holds_node() and e.domain_uid == entry.domain_uid
                for e in self._checkpoint.claims.values()
            )
            checkpoint.save(self.cfg.checkpoint_file, self._checkpoint)
            if entry.holds_node() and not still_held and self._node_domain == entry.domain_uid:
                # The node's last claim of this domain is gone: it leaves the domain.
                kube_nodes.patch_labels(
                    self.api, self.cfg.node_name, {constants.COMPUTE_DOMAIN_LABEL: None}
                )
                self._node_domain = None

    # -- housekeeping ---------------------------------------------------------------------

    def collect_garbage(self) -> None:
        """Forget old aborted claims; unprepare started ones whose claim no longer exists."""
        now = self.clock()
        with self._lock:
            expired = [
                uid
                for uid, e in self._checkpoint.claims.items()
                if e.state is checkpoint.ClaimState.ABORTED
                and now - (e.aborted_at or now) > ABORTED_TTL
            ]
            for uid in expired:
                del self._checkpoint.claims[uid]
            if expired:
                checkpoint.save(self.cfg.checkpoint_file, self._checkpoint)
            started = [
                e
                for e in self._checkpoint.claims.values()
                if e.state is checkpoint.ClaimState.STARTED
            ]
        self._release_unheld_node()
        for entry in started:
            path = (
                f"/apis/resource.k8s.io/v1/namespaces/{entry.namespace}/resourceclaims/{entry.name}"
            )
            try:
                gone = self.api.get(path, timeout=10)["metadata"]["uid"] != entry.uid
            except kube_client.ApiError as exc:
                gone = exc.status == kube_client.NOT_FOUND
            if gone:
                log.info(
                    "claim %s/%s vanished while being prepared; cleaning up",
                    entry.namespace,
                    entry.name,
                )
                self._unprepare(entry.uid)

    def _release_unheld_node(self) -> None:
        """Drop the node's domain label when no claim holds it.

        A crash between labelling the node and recording the claim can leave one behind.
        """
        with self._lock:
            held = any(e.holds_node() for e in self._checkpoint.claims.values())
            if self._node_domain is None or held:
                return
            log.info(
                "node label names domain %s but no claim holds the node; removing it",
                self._node_domain,
            )
            kube_nodes.patch_labels(
                self.api, self.cfg.node_name, {constants.COMPUTE_DOMAIN_LABEL: None}
            )
            self._node_domain = None

    # -- events ---------------------------------------------------------------------------

    def _claim_event(self, ref: ClaimRef, exc: errors.PrepareError) -> None:
        """Tell the user on the claim and on the pods waiting for it."""
        message = f"{exc.message} (node {self.cfg.node_name})"
        targets = [
            events.ObjectRef(
                "ResourceClaim", ref.name, ref.namespace, ref.uid, "resource.k8s.io/v1"
            )
        ]
        targets += [events.ObjectRef("Pod", name, ref.namespace, uid) for name, uid in exc.pods]
        for target in targets:
            self.recorder.emit(target, reason=exc.reason, message=message, warning=True)

    def _node_event(self, reason: str, message: str, *, warning: bool) -> None:
        node = self.api.get(kube_nodes.path(self.cfg.node_name))
        target = events.ObjectRef("Node", self.cfg.node_name, uid=node["metadata"]["uid"])
        self.recorder.emit(target, reason=reason, message=message, warning=warning)
