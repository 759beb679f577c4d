"""Conversion latency of the webhook: one ComputeDomain read at v1beta1 through the API server.

The webhook runs as a local process (tests/support/webhook.py) on a one-node cluster. Each
sample is a GET of one stored (v1beta2) ComputeDomain: at v1beta1 the API server calls the
webhook, at v1beta2 it does not, so the difference is what conversion costs a reader. The
webhook's own view (its conversion histogram: parse, convert, encode) and a LIST of every
domain at v1beta1 (one ConversionReview for the page) are reported beside it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from computedomains.api import constants
from tests.benchmarks import report
from tests.support import kube
from tests.support import webhook as wh

DOMAINS = 200
READS = 300
NAMESPACE = "bench"
G, PLURAL = constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, wh.WebhookProcess]]:
    with wh.one_node_cluster(
        name=f"bench-{uuid.uuid4().hex[:6]}",
        helm_home=tmp_path_factory.mktemp("h"),
        log_dir=tmp_path_factory.mktemp("logs"),
    ) as (api, process):
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        kube.wait_for_default_service_account(api, NAMESPACE)
        yield api, process


def _timed_gets(custom: client.CustomObjectsApi, version: str) -> list[float]:
    samples = []
    for i in range(READS):
        start = time.perf_counter()
        custom.get_namespaced_custom_object(G, version, NAMESPACE, PLURAL, f"cd-{i % DOMAINS}")
        samples.append(time.perf_counter() - start)
    return samples


def test_conversion_latency(env: tuple[Any, wh.WebhookProcess]) -> None:
    api, process = env
    custom = client.CustomObjectsApi(api)
    for i in range(DOMAINS):
        custom.create_namespaced_custom_object(G, constants.VERSION, NAMESPACE, PLURAL, {
            "apiVersion": constants.API_VERSION, "kind": constants.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": f"cd-{i}"},
            "spec": {"numNodes": 4, "channel": {"resourceClaimTemplate": {"name": f"cd-{i}-ch"}}},
        })  # fmt: skip
    _timed_gets(custom, constants.VERSION)  # warm both connections (API server → webhook)
    converted = [s * 1000 for s in _timed_gets(custom, constants.VERSION)]
    stored = [s * 1000 for s in _timed_gets(custom, constants.VERSION_V1BETA2)]
    lists = []
    for _ in range(10):
        start = time.perf_counter()
        items = custom.list_namespaced_custom_object(G, constants.VERSION, NAMESPACE, PLURAL)
        lists.append((time.perf_counter() - start) * 1000)
        assert len(items["items"]) == DOMAINS
    reviews = process.sample("computedomains_webhook_conversion_duration_seconds_count")
    seconds = process.sample("computedomains_webhook_conversion_duration_seconds_sum")
    report.save(
        "webhook_conversion",
        {
            "get_at_v1beta1_ms": report.summarize(converted),
            "get_at_v1beta2_ms": report.summarize(stored),
            "conversion_cost_p50_ms": report.summarize(converted)["p50"]
            - report.summarize(stored)["p50"],
            f"list_{DOMAINS}_at_v1beta1_ms": report.summarize(lists),
            "webhook_reviews": reviews,
            "webhook_mean_review_ms": 1000 * seconds / reviews if reviews else None,
        },
    )
    assert reviews >= 2 * READS
