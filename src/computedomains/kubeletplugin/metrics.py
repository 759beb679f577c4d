"""The plugin's Prometheus series: claim requests, prepared devices, API server requests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import prometheus_client

from computedomains import scrapegauge
from computedomains.kube import requestmetrics

_PREFIX = "computedomains_kubeletplugin"
OPERATIONS = ("prepare", "unprepare")
# Prepare of a READY domain takes milliseconds; waiting for IMEX takes seconds.
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class PluginMetrics:
    """Series of one plugin; every label combination exists from the start at zero."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry
        self.requests = prometheus_client.Counter(
            f"{_PREFIX}_requests",
            "gRPC claim requests (one per claim)",
            ["operation"],
            registry=registry,
        )
        self.duration = prometheus_client.Histogram(
            f"{_PREFIX}_request_duration_seconds",
            "Time to prepare or unprepare one claim",
            ["operation"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.inflight = prometheus_client.Gauge(
            f"{_PREFIX}_requests_inflight",
            "Claims being prepared or unprepared now",
            ["operation"],
            registry=registry,
        )
        self.errors = prometheus_client.Counter(
            f"{_PREFIX}_errors",
            "Failed claim requests by reason",
            ["operation", "reason"],
            registry=registry,
        )
        self.api_requests = requestmetrics.ApiRequests(registry, prefix=_PREFIX)
        for operation in OPERATIONS:
            self.requests.labels(operation)
            self.duration.labels(operation)
            self.inflight.labels(operation)

    @contextlib.contextmanager
    def observe(self, operation: str) -> Iterator[None]:
        """Count, time and track one claim request."""
        self.requests.labels(operation).inc()
        inflight = self.inflight.labels(operation)
        inflight.inc()
        started = time.perf_counter()
        try:
            yield
        finally:
            self.duration.labels(operation).observe(time.perf_counter() - started)
            inflight.dec()

    def error(self, operation: str, reason: str) -> None:
        """Count a failed request."""
        self.errors.labels(operation, reason).inc()

    def track(self, source: Callable[[], dict[str, int]]) -> None:
        """Export the prepared-devices gauge from ``source``."""
        self.registry.register(
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_prepared_devices",
                "Devices of completed claims on this node",
                lambda: {(kind,): count for kind, count in source().items()},
                labels=["type"],
            )
        )
