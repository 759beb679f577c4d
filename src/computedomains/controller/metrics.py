"""The controller's Prometheus series.

``domains{status}`` and ``queue_depth`` are read from the caches and the queue at scrape
time, so they cannot drift. Formation latency is measured in this process's memory: from the
reconcile that gave a node its slot to the one that saw its IMEX ready (``scope="member"``),
and from a not-ready domain's first new member to the domain turning Ready
(``scope="domain"``); a controller restart forgets formations in progress.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import prometheus_client

from computedomains import scrapegauge
from computedomains.kube import client, requestmetrics

_PREFIX = "computedomains_controller"
_FORMATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
_RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ControllerMetrics:
    """Series of one controller process; label combinations known up front start at zero."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry
        self.reconciles = prometheus_client.Counter(
            f"{_PREFIX}_reconciles", "Reconciles of one ComputeDomain", registry=registry
        )
        self.reconcile_errors = prometheus_client.Counter(
            f"{_PREFIX}_reconcile_errors", "Reconciles that failed, by reason", ["reason"],
            registry=registry,
        )  # fmt: skip
        self.reconcile_duration = prometheus_client.Histogram(
            f"{_PREFIX}_reconcile_duration_seconds", "Time to reconcile one ComputeDomain",
            buckets=_RECONCILE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.formation = prometheus_client.Histogram(
            f"{_PREFIX}_formation_seconds",
            "From a node getting its slot to its IMEX being ready (member), or from a domain's "
            "first new member to the domain being Ready (domain)",
            ["scope"], buckets=_FORMATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.api_requests = requestmetrics.ApiRequests(registry, prefix=_PREFIX)
        self.placement = prometheus_client.Counter(
            f"{_PREFIX}_placement_answers",
            "Binding-condition answers to claims allocated on free nodes, by outcome",
            ["outcome"], registry=registry,
        )  # fmt: skip
        for outcome in ("reserved", "refused"):
            self.placement.labels(outcome)
        for scope in ("member", "domain"):
            self.formation.labels(scope)
        for reason in client.ERROR_REASONS:
            self.reconcile_errors.labels(reason)

    def observe_placement(self, granted: bool) -> None:
        """Count one binding-condition answer of the binder."""
        self.placement.labels("reserved" if granted else "refused").inc()

    @contextlib.contextmanager
    def reconcile(self) -> Iterator[None]:
        """Count and time one reconcile."""
        self.reconciles.inc()
        with self.reconcile_duration.time():
            yield

    def track(
        self, *, domains: Callable[[], dict[str, int]], depth: Callable[[], int],
        leader: Callable[[], bool],
    ) -> None:  # fmt: skip
        """Export the scrape-time gauges from these sources."""
        for gauge in (
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_domains",
                "ComputeDomains by their status",
                lambda: {(status,): count for status, count in domains().items()},
                labels=["status"],
            ),
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_queue_depth",
                "Domains waiting to be reconciled",
                scrapegauge.value(depth),
            ),
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_leader",
                "1 while this replica leads",
                scrapegauge.value(lambda: int(leader())),
            ),
        ):
            self.registry.register(gauge)


class FormationClock:
    """Start and end times of formations in progress, per (domain, node) and per domain."""

    def __init__(self, metrics: ControllerMetrics, clock: Callable[[], float] = time.monotonic):
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._members: dict[tuple[str, str], float] = {}
        self._domains: dict[str, float] = {}

    def joined(self, uid: str, nodes: tuple[str, ...], *, domain_ready: bool) -> None:
        """Nodes got slots; the domain's formation starts unless one is already running."""
        now = self._clock()
        with self._lock:
            for node in nodes:
                self._members.setdefault((uid, node), now)
            if nodes and not domain_ready:
                self._domains.setdefault(uid, now)

    def ready(self, uid: str, nodes: tuple[str, ...], *, domain_ready: bool) -> None:
        """Nodes turned ready (and maybe the domain): observe how long that took."""
        now = self._clock()
        with self._lock:
            for node in nodes:
                started = self._members.pop((uid, node), None)
                if started is not None:
                    self._metrics.formation.labels("member").observe(now - started)
            if domain_ready and uid in self._domains:
                self._metrics.formation.labels("domain").observe(now - self._domains.pop(uid))

    def forget(self, uid: str) -> None:
        """Drop everything about a domain that went away."""
        with self._lock:
            self._members = {k: v for k, v in self._members.items() if k[0] != uid}
            self._domains.pop(uid, None)
