"""Run the controller: caches, metrics and probes always; workers only while leading.

Both replicas keep their caches synced, so a standby that wins the Lease starts reconciling
at once. Leading means: every known domain is queued, workers reconcile, a housekeeping
thread collects leftovers and re-queues every domain now and then (a safety net for changes
no watch event announced; an idle domain costs a read of the caches, no write). A leader that
loses the Lease stops its term's threads and competes again, a ready standby; the incumbent
exits instead, which the kubelet's crash-loop backoff turns into minutes without a standby
after a few API server outages. What a new term plans from may lag, as a standby's does when
it takes over: every write carries its object's resourceVersion. Should a thread of the last
term still be busy after the stop grace, the replica exits after all: two terms must never
reconcile at once.

Every write of the leader (the workers', the binder's, the turn keeper's, the collector's and
its Events) goes through one client, :attr:`Controller.writer`, fenced by
:meth:`Controller.may_write`, the elector's own view of its lease, checked before every try
of every write: a replica that was paused or cut off past its renew deadline writes nothing
more, even before its elector has noticed and stopped it, and a write waiting in the
client's retries (a 429, a back-off) is not sent once the fence has closed.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import types
from collections.abc import Callable

import prometheus_client

from computedomains import httpserver, waiting
from computedomains.api import models
from computedomains.controller import binder, collector, config, metrics, turnkeeper
from computedomains.controller.caches import Caches
from computedomains.controller.reconciler import Reconciler
from computedomains.kube import client as kube_client
from computedomains.kube import events, leaderelection, workqueue, writes

log = logging.getLogger(__name__)
COMPONENT = "compute-domains-controller"
BATCH_SECONDS = 0.2
"""Changes to one domain within this window are reconciled together: 18 claims allocated
in a burst cost one clique write, not eighteen."""
RESYNC_SECONDS = 30.0
WORKERS = 4
"""Reconciles are mostly waiting on the API server; one domain never uses two workers."""
SYNC_TIMEOUT = 30.0
STOP_GRACE = 10.0
"""Seconds workers get to finish the reconcile they are in when the replica stops."""


class Workers:
    """The reconcile workers and the housekeeping thread of a leading replica."""

    def __init__(
        self, *, reconcile: Callable[[str], float | None],
        caches: Caches, collect: Callable[[], object], stats: metrics.ControllerMetrics,
        gc_interval: float,
    ) -> None:  # fmt: skip
        self._queue = workqueue.WorkQueue()
        self._reconcile = reconcile
        self._caches = caches
        self._collect = collect
        self._stats = stats
        self._gc_interval = gc_interval
        self._halt = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def queue(self) -> workqueue.WorkQueue:
        """The queue of the current leadership term (a stopped term's takes nothing more)."""
        return self._queue

    def start(self) -> None:
        """Queue every domain and start the threads: a new term, with a queue of its own."""
        if self._halt.is_set():
            self._threads = []  # first: alive() must not judge the last term's threads
            self._queue = workqueue.WorkQueue()
            self._halt = threading.Event()
        for uid in self._caches.domain_uids():
            self._queue.add(uid)
        self._threads = [
            threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
            for i in range(WORKERS)
        ]
        self._threads.append(threading.Thread(target=self._housekeep, name="housekeeping",
                                              daemon=True))  # fmt: skip
        for thread in self._threads:
            thread.start()

    def stop(self) -> bool:
        """Stop handing out work and wait (bounded) for the reconciles in progress.

        Returns whether every thread ended.
        """
        self._queue.shutdown()
        self._halt.set()
        deadline = time.monotonic() + STOP_GRACE
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        hung = [t.name for t in self._threads if t.is_alive()]
        if hung:
            log.error("threads still busy after %.0fs: %s", STOP_GRACE, ", ".join(hung))
        return not hung

    def alive(self) -> bool:
        """Every started thread still runs (or none was started)."""
        return all(t.is_alive() for t in self._threads) or self._halt.is_set()

    def _work(self) -> None:
        queue = self._queue  # this term's, even once a later term has its own
        while (uid := queue.get()) is not None:
            try:
                with self._stats.reconcile():
                    later = self._reconcile(uid)
                queue.forget(uid)
                if later is not None:
                    queue.add_after(uid, later)
            except writes.Fenced:
                # Not the domain's failure: the lease may be gone, and the elector stops the
                # workers soon. Should a late renewal have kept it, the domain is retried.
                log.info("domain %s not reconciled: the leader lease may have expired", uid)
                queue.add_rate_limited(uid)
            except Exception as exc:  # noqa: BLE001 - any failure is retried with backoff
                self._stats.reconcile_errors.labels(kube_client.error_reason(exc)).inc()
                delay = queue.add_rate_limited(uid)
                log.warning("reconcile of domain %s failed (attempt %d), retrying in %.1fs: %s",
                            uid, queue.failures(uid), delay, exc)  # fmt: skip
            finally:
                queue.done(uid)

    def _housekeep(self) -> None:
        halt, queue = self._halt, self._queue
        next_gc = next_resync = time.monotonic()
        while not halt.wait(max(min(next_gc, next_resync) - time.monotonic(), 0)):
            now = time.monotonic()
            if now >= next_gc:
                try:
                    self._collect()
                except Exception:
                    log.exception("collecting leftovers failed; retrying next round")
                next_gc = now + self._gc_interval
            if now >= next_resync:
                for uid in self._caches.domain_uids():
                    queue.add(uid)
                next_resync = now + RESYNC_SECONDS


def _domain_counts(caches: Caches) -> dict[str, int]:
    counts = {s.value: 0 for s in models.Status}
    for raw in caches.domains.items():
        shown = (raw.get("status") or {}).get("status") or models.Status.NOT_READY.value
        counts[shown] = counts.get(shown, 0) + 1
    return counts


class Controller:
    """One replica: its caches, reconciler, workers, elector and HTTP endpoint."""

    def __init__(self, cfg: config.ControllerConfig) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.synced = threading.Event()
        self.leading = threading.Event()
        self.term_ended = True
        """Whether every thread of the last leadership term ended within the stop grace."""
        self.api = kube_client.connect(cfg.kubeconfig, cfg.api_budget)
        self.stats = metrics.ControllerMetrics(prometheus_client.CollectorRegistry())
        self.stats.api_requests.attach(self.api)
        self.writer = writes.fenced(self.api, self.may_write)
        """The client of every leader-only write; the caches and the elector use :attr:`api`."""
        self.caches = Caches(
            self.api, namespace=cfg.namespace, on_key=self._changed, on_relist=self._relisted
        )
        self.turns = turnkeeper.TurnKeeper(
            self.writer, self.caches, enabled=cfg.placement_turns, may_write=self.may_write
        )
        # Off the reconcile path: a formation never waits for an Event's API call.
        self.recorder = events.BackgroundRecorder(
            events.Recorder(self.writer, component=COMPONENT, host=cfg.pod_name),
            may_write=self.may_write,
        )
        self.binder = binder.Binder(
            self.writer, self.caches, recorder=self.recorder, may_write=self.may_write,
            observe=self.stats.observe_placement, settling=self.turns.settling,
        )  # fmt: skip
        # The binder and the turn keeper read the caches and hear their placement news.
        self.caches.listen(
            on_node=self.binder.node_changed,
            on_placement=self.turns.changed,
            on_claim=self.binder.claim_changed,
        )
        self.reconciler = Reconciler(
            self.writer, self.caches, limit=cfg.max_nodes_per_clique, recorder=self.recorder,
            formation=metrics.FormationClock(self.stats), may_write=self.may_write,
        )  # fmt: skip
        self.workers = Workers(
            reconcile=self.reconciler.reconcile, caches=self.caches,
            stats=self.stats, collect=self._collect, gc_interval=cfg.gc_interval,
        )  # fmt: skip
        self.elector = leaderelection.LeaderElector(
            self.api, namespace=cfg.namespace, name=cfg.lease_name,
            me=leaderelection.identity(cfg.pod_name), timing=cfg.election,
            on_started_leading=self._started, on_stopped_leading=self._stopped,
        )  # fmt: skip
        self.stats.track(domains=lambda: _domain_counts(self.caches),
                         depth=lambda: len(self.workers.queue),
                         leader=self.leading.is_set)  # fmt: skip

    def may_write(self) -> bool:
        """The fence of every write: leading without election, or holding the Lease now."""
        return not self.cfg.leader_elect or self.elector.holds_lease()

    def _collect(self) -> None:
        # Checked once per collection, and by the writer before each removal, which carries
        # preconditions besides.
        if not self.may_write():
            return
        try:
            collector.collect(self.writer, self.caches)
        except writes.Fenced as exc:
            log.info("collection stopped: %s", exc)

    def _changed(self, uid: str) -> None:
        self.workers.queue.add_after(uid, BATCH_SECONDS)

    def _relisted(self) -> None:
        for uid in self.caches.domain_uids():
            self.workers.queue.add_after(uid, BATCH_SECONDS)

    def _started(self) -> None:
        # A term starts as a fresh process would: nothing remembered of what this replica
        # wrote in an earlier term (another leader may have written since).
        self.caches.forget_writes()
        self.reconciler.forget_all()
        self.leading.set()
        if self.cfg.leader_elect:
            lease = events.ObjectRef(kind="Lease", name=self.cfg.lease_name,
                                     namespace=self.cfg.namespace,
                                     api_version="coordination.k8s.io/v1")  # fmt: skip
            self.recorder.emit(lease, reason="LeaderElection",
                               message=f"{self.elector.identity} became leader")  # fmt: skip
        self.turns.start()
        self.binder.start()
        self.workers.start()

    def _stopped(self) -> None:
        self.binder.stop()  # both stop taking work at once; then each gets its grace
        ended = [self.workers.stop(), self.binder.join(STOP_GRACE), self.turns.stop(STOP_GRACE)]
        self.term_ended = all(ended)
        # Before the Lease goes: the Events the workers queued are written while it is held.
        # What is left then belongs to this term alone.
        if not self.recorder.flush(STOP_GRACE):
            self.recorder.discard()
        self.leading.clear()

    def healthz(self) -> tuple[bool, str]:
        """Live: lease renewal on time (when leading) and every worker thread running."""
        renewing = self.elector.healthy()
        role = "leader" if self.leading.is_set() else "standby"
        detail = f"{self.elector.identity}: {role}, lease renewal {'ok' if renewing else 'overdue'}"
        return renewing and self.workers.alive(), detail

    def readyz(self) -> tuple[bool, str]:
        """Ready once the caches are synced, leader or standby."""
        return self.synced.is_set(), f"caches synced: {self.synced.is_set()}"

    def serve(self) -> int:
        """Sync the caches, then lead (or wait to, again after losing the Lease).

        0 after a stop; 1 when a lost term's thread would not end (the pod restarts).
        """
        while not self.stop.is_set():
            try:
                self.caches.wait_synced(SYNC_TIMEOUT)
                break
            except waiting.WaitTimeout as exc:
                log.warning("caches not synced yet: %s", exc)
        if self.stop.is_set():
            return 0
        self.synced.set()
        log.info("caches synced; %s", "competing for the lease" if self.cfg.leader_elect
                 else "leading without election")  # fmt: skip
        if self.cfg.leader_elect:
            while not self.stop.is_set() and not self.elector.run(self.stop):
                if not self.term_ended:
                    log.error(
                        "%s lost the lease and a thread of its term is still busy; exiting, "
                        "so that no new term overlaps it",
                        self.elector.identity,
                    )
                    return 1
                # A standby now, ready, that competes again: exiting would let the kubelet's
                # crash-loop backoff keep it down for minutes after a few API server outages.
                log.warning("%s lost the lease; competing for it again", self.elector.identity)
            return 0
        self._started()
        self.stop.wait()
        self._stopped()
        return 0


def run(cfg: config.ControllerConfig) -> int:
    """Serve until SIGTERM/SIGINT (0), or a lost term that would not end (1)."""
    controller = Controller(cfg)

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        controller.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    http = httpserver.serve(
        cfg.http_bind, registry=controller.stats.registry,
        probes={"/healthz": controller.healthz, "/readyz": controller.readyz},
    )  # fmt: skip
    controller.caches.start()
    controller.recorder.start()
    try:
        return controller.serve()
    finally:
        controller.recorder.close(STOP_GRACE)
        controller.caches.stop()
        http.shutdown()
