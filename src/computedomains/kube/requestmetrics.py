"""Count a component's requests to the API server by verb, resource and answer code.

Every component that writes exports the same series (``<prefix>_api_requests_total``), so
"no 409 or 429 on our writes" is read from our own counters, not from the API server's, which
also count the scheduler's, the kubelet's and everybody else's.
"""

from __future__ import annotations

import prometheus_client

from computedomains.kube import client


def resource_of(path: str) -> str:
    """The resource an API path addresses, for labels: ``computedomains/status``, ``leases``.

    Names and namespaces are dropped so that the label set stays small.
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return parts[-1] if parts else ""
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"


class ApiRequests:
    """The ``<prefix>_api_requests_total`` counter of one component."""

    def __init__(self, registry: prometheus_client.CollectorRegistry, *, prefix: str) -> None:
        self.counter = prometheus_client.Counter(
            f"{prefix}_api_requests",
            "Requests to the API server",
            ["verb", "resource", "code"],
            registry=registry,
        )

    def observe(self, method: str, path: str, status: int) -> None:
        """Count one request (a :class:`computedomains.kube.client.Client` observer)."""
        self.counter.labels(method, resource_of(path), str(status)).inc()

    def attach(self, api: client.Client) -> None:
        """Count every request ``api`` makes from now on."""
        api.observer = self.observe
