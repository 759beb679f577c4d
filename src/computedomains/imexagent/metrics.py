"""The IMEX agent's Prometheus series: IMEX restarts, reloads, kills and the reported state."""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client

from computedomains import scrapegauge
from computedomains.kube import requestmetrics

_PREFIX = "computedomains_imexagent"
RESTART_CAUSES = ("crash", "domain")
STATES = ("READY", "NOT_READY", "FAILED", "STOPPED")


class AgentMetrics:
    """Series of one agent; every label combination exists from the start at zero."""

    def __init__(self, registry: prometheus_client.CollectorRegistry) -> None:
        self.registry = registry
        self.restarts = prometheus_client.Counter(
            f"{_PREFIX}_imex_restarts",
            "nvidia-imex restarts, by cause: it crashed, or the node's domain changed",
            ["cause"],
            registry=registry,
        )
        self.reloads = prometheus_client.Counter(
            f"{_PREFIX}_imex_reloads",
            "SIGUSR1 reloads of nvidia-imex (peers changed)",
            registry=registry,
        )
        self.kills = prometheus_client.Counter(
            f"{_PREFIX}_imex_kills",
            "Stops of nvidia-imex that needed SIGKILL after the stop timeout",
            registry=registry,
        )
        self.api_requests = requestmetrics.ApiRequests(registry, prefix=_PREFIX)
        for cause in RESTART_CAUSES:
            self.restarts.labels(cause)

    def restarted(self, cause: str) -> None:
        """Count a restart."""
        self.restarts.labels(cause).inc()

    def reloaded(self) -> None:
        """Count a SIGUSR1."""
        self.reloads.inc()

    def killed(self) -> None:
        """Count a SIGKILL escalation."""
        self.kills.inc()

    def track(self, source: Callable[[], str]) -> None:
        """Export the state gauge from ``source`` (the reported state)."""

        def states() -> scrapegauge.Samples:
            current = source()
            return {(state,): int(state == current) for state in STATES}

        self.registry.register(
            scrapegauge.ScrapeGauge(
                f"{_PREFIX}_imex_state",
                "1 for the IMEX state this node reports now (the ImexStatus file's state), else 0",
                states,
                labels=["state"],
            )
        )
