"""The IMEX agent's Prometheus series: IMEX restarts, reloads, kills and the reported state."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from computedomains.kube import requestmetrics

_PREFIX = "computedomains_imexagent"
RESTART_CAUSES = ("crash", "domain")
STATES = ("READY", "NOT_READY", "FAILED", "STOPPED")


class _State(Collector):
    """Reads the current report at scrape time, so the gauge cannot drift from the file."""

    def __init__(self, source: Callable[[], str]) -> None:
        self._source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._source()
        family = GaugeMetricFamily(
            f"{_PREFIX}_imex_state",
            "1 for the IMEX state this node reports now (the ImexStatus file's state), else 0",
            labels=["state"],
        )
        for candidate in STATES:
            family.add_metric([candidate], 1 if candidate == state else 0)
        yield family


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
        self.registry.register(_State(source))
