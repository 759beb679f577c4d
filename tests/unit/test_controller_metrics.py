"""The controller's metrics: API request labels and formation latency."""

from __future__ import annotations

import prometheus_client
import pytest

from computedomains.controller import metrics
from computedomains.kube import requestmetrics


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status",
         "computedomains/status"),
        ("/apis/resource.nvidia.com/v1beta1/computedomains", "computedomains"),
        ("/apis/resource.nvidia.com/v1beta1/namespaces/d/computedomaincliques/u.c",
         "computedomaincliques"),
        ("/api/v1/nodes/gb200-r1-n00", "nodes"),
        ("/api/v1/namespaces/ns/events", "events"),
        ("/apis/coordination.k8s.io/v1/namespaces/d/leases/ctl", "leases"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/version", "version"),
    ],
)  # fmt: skip
def test_resource_of(path: str, resource: str) -> None:
    assert requestmetrics.resource_of(path) == resource


def value(registry: prometheus_client.CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_formation_is_timed_per_member_and_per_domain() -> None:
    registry = prometheus_client.CollectorRegistry()
    stats = metrics.ControllerMetrics(registry)
    now = [100.0]
    clock = metrics.FormationClock(stats, clock=lambda: now[0])
    clock.joined("d", ("a", "b"), domain_ready=False)
    now[0] = 102
    clock.joined("d", ("a",), domain_ready=False)  # already started: keeps its start
    now[0] = 103
    clock.ready("d", ("a",), domain_ready=False)
    now[0] = 105
    clock.ready("d", ("b",), domain_ready=True)
    count = "computedomains_controller_formation_seconds_count"
    total = "computedomains_controller_formation_seconds_sum"
    assert value(registry, count, scope="member") == 2
    assert value(registry, total, scope="member") == 3 + 5
    assert value(registry, count, scope="domain") == 1
    assert value(registry, total, scope="domain") == 5
    clock.joined("d", ("c",), domain_ready=True)
    clock.forget("d")
    clock.ready("d", ("c",), domain_ready=True)
    assert value(registry, count, scope="member") == 2


def test_requests_are_counted_by_verb_resource_and_code() -> None:
    registry = prometheus_client.CollectorRegistry()
    stats = metrics.ControllerMetrics(registry)
    stats.api_requests.observe("PUT", "/api/v1/nodes/a", 409)
    stats.track(domains=lambda: {"Ready": 2}, depth=lambda: 3, leader=lambda: True)
    name = "computedomains_controller_api_requests_total"
    assert value(registry, name, verb="PUT", resource="nodes", code="409") == 1
    assert value(registry, "computedomains_controller_domains", status="Ready") == 2
    assert value(registry, "computedomains_controller_queue_depth") == 3
    assert value(registry, "computedomains_controller_leader") == 1
