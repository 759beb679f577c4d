"""Benchmark: four racks (72 simulated nodes, 4 cliques), every per-node process real.

The chart installed on 72 nodes: a kubelet plugin, node-init and an IMEX agent (with the fake
IMEX, start-up 0.5 s) per node, the controller and the webhook. Measured:

1. One domain of 288 pods, 4 per node: pods created → all Ready, and the domain Ready.
2. 36 domains of 2 nodes, three rounds of create → all Ready → delete: time per round.

In both: HTTP 409/429 answers to our components' own requests (their request counters: none
may be refused), the API server's 409/429 by resource (every writer's, for comparison), and
slot moves (cliques sampled every 0.5 s while forming: a node's slot must never change
while it is a member).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client
from prometheus_client import parser

from cdsim import cluster, topology
from cdsim import nodes as sim_nodes
from computedomains import waiting
from computedomains.api import constants
from tests.benchmarks import footprint, ownmetrics, report, test_node_footprint
from tests.benchmarks.conftest import NAMESPACE, chart_cluster
from tests.support import domains

pytestmark = pytest.mark.cluster

RACKS = 4
PODS_PER_NODE = 4
PAIRS = 36
ROUNDS = 3
OURS = ("computedomains", "computedomaincliques", "resourceslices")
"""Resources only this chart writes: not one 409/429 may be answered on them."""


@pytest.fixture(scope="module")
def racks(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[cluster.SimCluster, Any, str, float]]:
    started = time.monotonic()
    shape = topology.Topology(racks=RACKS)
    with chart_cluster(tmp_path_factory.mktemp("helm"), shape, install_minutes=15) as ready:
        yield (*ready, time.monotonic() - started)


def _refusals(api: Any) -> dict[str, float]:
    """409 and 429 answers of the API server so far, by resource (its own counter)."""
    serialized = api.param_serialize("GET", "/metrics", header_params={"Accept": "text/plain"},
                                     auth_settings=["BearerToken"])  # fmt: skip
    text = api.call_api(*serialized).read().decode()
    out: dict[str, float] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            if labels.get("code") in ("409", "429"):
                key = labels.get("resource", "") + (
                    f"/{labels['subresource']}" if labels.get("subresource") else ""
                )
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


class SlotWatch:
    """First slot seen per (domain, clique, node), and how many times one changed."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], int] = {}
        self.moves = 0

    def sample(self, api: Any, driver_ns: str) -> None:
        """Read every clique object once."""
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            constants.GROUP, constants.STORAGE_VERSION, driver_ns, constants.CLIQUE_PLURAL
        )["items"]
        for obj in listed:
            for daemon in obj.get("daemons") or []:
                if daemon.get("index") is None:
                    continue
                key = (obj["metadata"]["name"], daemon["nodeName"])
                seen = self.first.setdefault(key, daemon["index"])
                self.moves += seen != daemon["index"]


def _until(what: str, done: Callable[[], bool], watch: SlotWatch, api: Any, ns: str) -> float:
    """Seconds until ``done``, sampling the slots at every look; on a timeout, where the
    workload pods stand (for the next look at why)."""
    started = time.monotonic()

    def check() -> bool:
        watch.sample(api, ns)
        return done()

    try:
        # A list cut off by an overloaded API server is a look that failed, not the end.
        waiting.until(
            what, check, timeout=600, interval=0.5, retry_on=(urllib3.exceptions.HTTPError,)
        )
    except waiting.WaitTimeout:
        print(f"\nwhere the pods stand: {_standing(api)}")
        raise
    return time.monotonic() - started


def _standing(api: Any) -> dict[str, int]:
    """Workload pods by phase and, for those not Ready, their last condition's reason."""
    counts: dict[str, int] = {}
    for pod in client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items:
        conditions = pod.status.conditions or []
        stuck = [c for c in conditions if c.status != "True"]
        key = f"{pod.status.phase}/" + (f"{stuck[0].type}:{stuck[0].reason}" if stuck else "Ready")
        counts[key] = counts.get(key, 0) + 1
    return counts


def _all_ready(api: Any, selector: str, count: int) -> Callable[[], bool]:
    core = client.CoreV1Api(api)

    def check() -> bool:
        # Raw JSON: building the client's models for hundreds of pods twice a second would
        # load the two cores the cluster runs on.
        answer = core.list_namespaced_pod(NAMESPACE, label_selector=selector,
                                          _preload_content=False)  # fmt: skip
        pods = json.loads(cast(Any, answer).data)["items"]
        ready = [
            p for p in pods
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in p.get("status", {}).get("conditions") or [])
        ]  # fmt: skip
        return len(ready) == count

    return check


def _nodes(api: Any) -> list[str]:
    listed = client.CoreV1Api(api).list_node(label_selector=sim_nodes.RACK_LABEL).items
    return sorted(str(n.metadata.name) for n in listed)


def _delete_domain(api: Any, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        constants.GROUP, constants.STORAGE_VERSION, NAMESPACE, constants.COMPUTE_DOMAIN_PLURAL, name
    )


def _gone(api: Any, selector: str) -> Callable[[], bool]:
    core = client.CoreV1Api(api)
    return lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=selector).items


@pytest.mark.timeout(3600)
def test_four_racks_one_big_domain_and_pairs_churning(
    racks: tuple[cluster.SimCluster, Any, str, float],
) -> None:
    _, api, driver_ns, setup_s = racks
    nodes = _nodes(api)
    assert len(nodes) == 18 * RACKS
    core = client.CoreV1Api(api)

    # 1. One domain, 4 pods on every node.
    refused0, watch = _refusals(api), SlotWatch()
    ours0 = ownmetrics.refusals(api, driver_ns)
    big = domains.create_domain(api, NAMESPACE)
    started = time.monotonic()
    for node in nodes:
        for i in range(PODS_PER_NODE):
            core.create_namespaced_pod(NAMESPACE, {
                "metadata": {"name": f"big-{node[-6:]}-{i}", "labels": {"run": "big"}},
                "spec": domains.pod_spec(big, node=node),
            })  # fmt: skip
    created_s = time.monotonic() - started
    pods = len(nodes) * PODS_PER_NODE
    ready_after_creation = _until(
        f"{pods} pods Ready", _all_ready(api, "run=big", pods), watch, api, driver_ns
    )
    big_ready_s = time.monotonic() - started
    name = big["metadata"]["name"]
    waiting.until(
        f"ComputeDomain {name} Ready",
        lambda: (
            (domains.get_domain(api, NAMESPACE, name).get("status") or {}).get("status") == "Ready"
        ),
        timeout=120,
    )
    big_refused = _delta(_refusals(api), refused0)
    big_ours = _delta(ownmetrics.refusals(api, driver_ns), ours0)
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector="run=big")
    waiting.until("the big domain's pods gone", _gone(api, "run=big"), timeout=600, interval=1)
    _delete_domain(api, name)

    # 2. Pairs of nodes churning.
    refused1, rounds = _refusals(api), []
    ours1 = ownmetrics.refusals(api, driver_ns)
    for r in range(ROUNDS):
        tag = f"pairs{r}"
        made = [domains.create_domain(api, NAMESPACE) for _ in range(PAIRS)]
        started = time.monotonic()
        for i, domain in enumerate(made):
            for node in (nodes[(2 * i + r) % len(nodes)], nodes[(2 * i + 1 + r) % len(nodes)]):
                core.create_namespaced_pod(NAMESPACE, {
                    "metadata": {"name": f"{tag}-{uuid.uuid4().hex[:6]}", "labels": {"run": tag}},
                    "spec": domains.pod_spec(domain, node=node),
                })  # fmt: skip
        _until(
            f"round {r}: {2 * PAIRS} pods Ready",
            _all_ready(api, f"run={tag}", 2 * PAIRS), watch, api, driver_ns,
        )  # fmt: skip
        rounds.append(time.monotonic() - started)
        core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"run={tag}")
        waiting.until(f"round {r}'s pods gone", _gone(api, f"run={tag}"), timeout=600, interval=1)
        for domain in made:
            _delete_domain(api, domain["metadata"]["name"])
    pairs_refused = _delta(_refusals(api), refused1)
    pairs_ours = _delta(ownmetrics.refusals(api, driver_ns), ours1)

    figures = {
        "nodes": len(nodes),
        "cliques": RACKS,
        "setup_install_and_publish_s": round(setup_s, 1),
        "one_domain": {
            "pods": pods,
            "create_calls_s": round(created_s, 1),
            "pods_all_ready_s": round(big_ready_s, 1),
            "ready_after_last_create_s": round(ready_after_creation, 1),
            "http_409_429_ours": big_ours,
            "http_409_429_by_resource": big_refused,
        },
        "pairs_churning": {
            "domains": PAIRS,
            "rounds": ROUNDS,
            "round_all_ready_s": report.summarize(rounds),
            "http_409_429_ours": pairs_ours,
            "http_409_429_by_resource": pairs_refused,
        },
        "slot_moves": watch.moves,
        "footprint_idle": footprint.measure(api, len(nodes)),
    }
    report.save(
        "four-racks",
        figures,
        plots=[
            report.Plot(
                name="ready",
                title=f"{len(nodes)} nodes: pods created → all Ready",
                labels=[f"one domain, {pods} pods", f"{PAIRS} pairs (p50 of {ROUNDS} rounds)"],
                series={"seconds": [big_ready_s, report.summarize(rounds)["p50"]]},
                unit="seconds",
            ),
            test_node_footprint.rss_plot(figures["footprint_idle"]),
        ],
    )
    assert watch.moves == 0
    assert big_ours == {} and pairs_ours == {}, (big_ours, pairs_ours)
    for refused in (big_refused, pairs_refused):
        assert not {k: v for k, v in refused.items() if k.split("/")[0] in OURS}, refused
