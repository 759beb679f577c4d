"""The webhook's Prometheus series: reviews by path and outcome, conversion latency, TLS."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import prometheus_client

from computedomains import scrapegauge

_PREFIX = "computedomains_webhook"
PATHS = ("/convert", "/validate/computedomains", "/mutate/pods")
OUTCOMES = ("ok", "rejected", "error", "not-ready")
"""ok: converted, allowed or mutated; rejected: conversion Failed or admission denied;
error: not a review (HTTP 400) or a failure of the webhook itself (HTTP 500); not-ready: an
admission review before the ComputeDomain cache synced (HTTP 503: the failurePolicy applies)."""
OTHER_PATH = "other"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class WebhookMetrics:
    """Series of one webhook process; every path and outcome exists from the start at zero."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry
        self.requests = prometheus_client.Counter(
            f"{_PREFIX}_requests", "Reviews answered, by path and outcome", ["path", "outcome"],
            registry=registry,
        )  # fmt: skip
        self.conversion_seconds = prometheus_client.Histogram(
            f"{_PREFIX}_conversion_duration_seconds",
            "Time to answer one ConversionReview (parse, convert every object, encode)",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.injections = prometheus_client.Counter(
            f"{_PREFIX}_cabundle_injections", "caBundle patches written, by target kind",
            ["target"], registry=registry,
        )  # fmt: skip
        self.tls_errors = prometheus_client.Counter(
            f"{_PREFIX}_tls_round_errors",
            "Rounds of Secret check and caBundle injection that failed (retried next round)",
            registry=registry,
        )  # fmt: skip
        for path in PATHS:
            for outcome in OUTCOMES:
                self.requests.labels(path, outcome)

    def answered(self, path: str, outcome: str) -> None:
        """Count one review."""
        self.requests.labels(path if path in PATHS else OTHER_PATH, outcome).inc()

    @contextlib.contextmanager
    def timing(self, path: str) -> Iterator[None]:
        """Time the block into the conversion histogram when ``path`` is ``/convert``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if path == PATHS[0]:
                self.conversion_seconds.observe(time.perf_counter() - start)

    def track(self, not_after: Callable[[], float | None]) -> None:
        """Export the serving certificate's end from ``not_after``."""
        self.registry.register(
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_certificate_expiry_timestamp_seconds",
                "When the serving certificate in use ends (Unix time); absent before one is loaded",
                scrapegauge.value(not_after),
            )
        )
