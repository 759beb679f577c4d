"""The plugin's core as the gRPC layer and the main loop see it: a thin facade.

The work lives in one module per noun: ``ledger`` (the node's claims and checkpoint, one
lock, no API calls under it), ``prepare``, ``imexwait``,
``collection`` (garbage collection) and ``rebuild`` (start-up without a usable checkpoint).
Here they are built, started in the right order (the ledger is complete before any collection
round), and every failure is turned into the claim's result and an Event.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from computedomains.api import constants, fabricverdict
from computedomains.kube import client as kube_client
from computedomains.kube import events, resourceclaims
from computedomains.kube import nodes as kube_nodes
from computedomains.kubeletplugin import (
    cdi,
    checkpoint,
    claims,
    collection,
    config,
    domainlookup,
    errors,
    ledger,
    metrics,
    prepare,
    procinfo,
    rebuild,
)

log = logging.getLogger(__name__)
COMPONENT = "compute-domains-kubelet-plugin"
MISSING = "CheckpointMissing"
"""Node Event reason: no checkpoint file, yet the node holds claims (it was deleted)."""


@dataclasses.dataclass(frozen=True)
class Result:
    """Per-claim outcome: devices, or an error for the kubelet."""

    devices: tuple[checkpoint.PreparedDevice, ...] = ()
    error: str = ""


class Driver:
    """Owns the node's claims, checkpoint and CDI specs."""

    def __init__(
        self,
        cfg: config.PluginConfig,
        *,
        api: kube_client.Client,
        stats: metrics.PluginMetrics,
        recorder: events.Recorder,
        fabric: prepare.FabricReader | None = None,
        recorded: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        """A driver for the node of ``cfg``.

        ``fabric`` reads the node's fabric verdict (default: the verdict file as it is);
        ``recorded`` the domain the membership record names for the node ("" none).
        """
        self.cfg = cfg
        self.api = api
        self.stats = stats
        self.recorder = recorder
        self._fabric = fabric or (lambda: fabricverdict.read_node(cfg.fabric_verdict_file))
        self._book = ledger.Ledger(
            checkpoint_file=cfg.checkpoint_file, cdi_root=cfg.cdi_root, clock=clock
        )
        self._preparer = prepare.Preparer(
            cfg,
            api=api,
            book=self._book,
            domains=domainlookup.DomainLookup(api),
            fabric=self._fabric,
            recorded=recorded,
        )
        self._collector = collection.Collector(api=api, book=self._book, clock=clock)

    # -- start-up -------------------------------------------------------------------------

    def load(self) -> None:
        """Load the checkpoint, or rebuild the claims without one.

        An unusable checkpoint is quarantined and named in a Warning Event on the Node.
        """
        boot_id = procinfo.boot_id(self.cfg.proc_root)
        loaded = checkpoint.load(self.cfg.checkpoint_file, boot_id=boot_id)
        for stale in loaded.discarded:
            cdi.remove(self.cfg.cdi_root, stale.uid)
        node = self.api.get(kube_nodes.path(self.cfg.node_name))
        state, detail = loaded.checkpoint, loaded.detail
        if loaded.outcome.needs_rebuild:
            label = (node["metadata"].get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL)
            rebuilt = self._rebuild(label)
            state.claims.update(rebuilt.entries)
            for uid in rebuilt.stale_specs:
                cdi.remove(self.cfg.cdi_root, uid)
            detail = f"{detail}; {rebuilt.summary()}"
        log.info("checkpoint: %s (%s)", loaded.outcome.value, detail)
        self._book.load(state, persist=loaded.outcome is not checkpoint.LoadOutcome.LOADED)
        reason: str | None = loaded.outcome.value
        if loaded.outcome is checkpoint.LoadOutcome.NEW:
            reason = MISSING if state.claims else None
        if reason is not None and loaded.outcome is not checkpoint.LoadOutcome.LOADED:
            target = events.ObjectRef("Node", self.cfg.node_name, uid=node["metadata"]["uid"])
            self.recorder.emit(target, reason=reason, message=detail, warning=True)
        self.stats.track(self.prepared_counts)

    def _rebuild(self, node_label: str | None) -> rebuild.Plan:
        items = self.api.get(resourceclaims.PATH).get("items", [])
        return rebuild.plan(
            specs=cdi.read_specs(self.cfg.cdi_root),
            allocated=rebuild.allocated_here(items, node=self.cfg.node_name),
            node_label=node_label,
        )

    @property
    def node_domain(self) -> str | None:
        """The domain the node's prepared claims hold it for (None: none)."""
        return self._book.held_domain()

    def prepared_counts(self) -> dict[str, int]:
        """Completed claims by device type (read at scrape time)."""
        return self._book.completed_devices()

    # -- the kubelet's calls --------------------------------------------------------------

    def prepare(self, ref: claims.ClaimRef, *, deadline: float) -> Result:
        """Prepare one claim; never raises (errors become the claim's result)."""
        try:
            return Result(devices=self._preparer.prepare(ref, deadline=deadline))
        except errors.PrepareError as exc:
            self.stats.error("prepare", exc.reason)
            self._claim_event(ref, exc)
            return Result(error=exc.message)
        except kube_client.API_ERRORS as exc:
            self.stats.error("prepare", kube_client.error_reason(exc))
            log.exception("prepare of %s/%s failed", ref.namespace, ref.name)
            return Result(error=f"preparing {ref.namespace}/{ref.name} failed: {exc}; will retry")

    def unprepare(self, ref: claims.ClaimRef) -> Result:
        """Undo a prepare; unknown claims succeed (the claim object may be long gone)."""
        try:
            self._book.release(ref.uid, namespace=ref.namespace, name=ref.name)
        except Exception as exc:  # one claim's failure is its own result, whatever it is
            self.stats.error("unprepare", kube_client.error_reason(exc))
            log.exception("unprepare of %s/%s failed", ref.namespace, ref.name)
            return Result(error=f"unpreparing {ref.namespace}/{ref.name} failed: {exc}; will retry")
        return Result()

    # -- housekeeping ---------------------------------------------------------------------

    def collect_garbage(self) -> None:
        """One collection round (``collection.py``)."""
        self._collector.run()

    def _claim_event(self, ref: claims.ClaimRef, exc: errors.PrepareError) -> None:
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
