"""How often domains race for one free node, and what a race costs, in each placement mode.

The race binding conditions exist for: two domains' claims allocated on the same free node in
the same instant. Two scenes, each repeated, in the placement modes of docs/placement.md
(after a ``helm upgrade`` each): the default (the placing domain's turn), binding conditions on
every free node (``controller.placementTurns=false``) and device taints alone
(``kubeletPlugin.bindingConditions=false``), with and without the webhook's anti-affinity
between domains (``webhook.spreadDomains``):

- **ten at once**: ten domains, one Deployment each (no node selector), created back to back
  beside a running domain on two nodes;
- **two for one node**: two domains whose pods both prefer the same free node.

Counted per scene: races (a binding condition the controller refused, or a pod refused for
another domain's node, ``NodeInAnotherComputeDomain``: each is one claim that lost a node),
and the seconds from the first create to every domain's pod Running (rounds over 30 s are
counted). A pod still not Running after 120 s is stranded and fails the benchmark.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import time
import uuid
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster
from computedomains import waiting
from tests.benchmarks import conftest, ownmetrics, publishing, report
from tests.support import domains, kube

TEN_ROUNDS = 3
PAIR_ROUNDS = 6
RUNNING_NODES = ["gb200-r0-n16", "gb200-r0-n17"]
"""The running domain's nodes, held throughout."""
TARGET, FALLBACK = "gb200-r1-n15", "gb200-r1-n16"
REFUSAL = "NodeInAnotherComputeDomain"
ALL_RUNNING_S = 120
"""A pod not Running by then is stranded: the benchmark fails."""
BOUND_S = 30
"""Every pod Running within this (docs/placement.md): rounds over it are counted."""
MODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("turn, domains apart (default)", ()),
    ("turn", ("webhook.spreadDomains=false",)),
    ("binding conditions everywhere, domains apart",
     ("webhook.spreadDomains=true", "controller.placementTurns=false")),
    ("device taints alone, domains apart", ("kubeletPlugin.bindingConditions=false",)),
    ("device taints alone", ("webhook.spreadDomains=false",)),
)  # fmt: skip
"""Each mode's ``--set`` values, applied in this order on top of the one before (``helm
upgrade --reuse-values``): the defaults; without the webhook's anti-affinity between domains
(``webhook.spreadDomains``); binding conditions on every free node; device taints alone."""


@dataclasses.dataclass
class Scene:
    """What the rounds of one scene in one mode counted."""

    races: list[int] = dataclasses.field(default_factory=list)
    at_prepare: int = 0
    """Of the races, those settled by refusing a pod (not a binding condition)."""
    all_running: list[float] = dataclasses.field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        """The scene's figures for the report."""
        return {
            "rounds": len(self.races),
            "rounds_with_a_race": sum(1 for r in self.races if r),
            "races": sum(self.races),
            "refused_at_prepare": self.at_prepare,
            "rounds_over_30_s": sum(1 for s in self.all_running if s > BOUND_S),
            "all_running_s": report.summarize(self.all_running),
        }


def _refused_answers(api: Any, driver_ns: str) -> int:
    """Binding conditions the leading controller refused so far."""
    text = ownmetrics.scrape(ownmetrics.leader(api, driver_ns))
    found = re.search(r'^computedomains_controller_placement_answers_total\{outcome="refused"\} '
                      r"(\S+)$", text, re.M)  # fmt: skip
    return int(float(found.group(1))) if found else 0


def _prepare_refusals(api: Any, namespaces: list[str]) -> set[str]:
    """Pods the plugin (or the controller's unstranding) refused for another domain's node."""
    core = client.CoreV1Api(api)
    return {
        str(e.involved_object.name)
        for ns in namespaces
        for e in core.list_namespaced_event(ns).items
        if e.reason == REFUSAL
    }


def _all_running(api: Any, namespaces: list[str], started: float) -> float:
    """Seconds from ``started`` until each namespace has exactly one pod, Running."""
    core = client.CoreV1Api(api)
    while time.monotonic() - started < ALL_RUNNING_S:
        pods = [core.list_namespaced_pod(ns).items for ns in namespaces]
        if all(len(p) == 1 and p[0].status.phase == "Running" for p in pods):
            return time.monotonic() - started
        time.sleep(0.2)  # the benchmark's sampling interval, not a wait for state
    raise AssertionError(f"{len(namespaces)} domains' pods not all Running in {ALL_RUNNING_S} s")


def _round(
    api: Any, driver_ns: str, count: int, affinity: dict[str, Any] | None
) -> tuple[int, int, float]:
    """One scene: ``count`` domains with a Deployment each; (binding conditions refused, pods
    refused, s until all Running)."""
    core = client.CoreV1Api(api)
    tenants = [f"race-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    for ns in tenants:
        core.create_namespace({"metadata": {"name": ns}})
        kube.wait_for_default_service_account(api, ns)
    refused_before = _refused_answers(api, driver_ns)
    try:
        created = [domains.create_domain(api, ns) for ns in tenants]
        started = time.monotonic()
        for ns, domain in zip(tenants, created, strict=True):
            domains.create_deployment(api, ns, domain, affinity=affinity)
        seconds = _all_running(api, tenants, started)
        refused = _refused_answers(api, driver_ns) - refused_before
        return refused, len(_prepare_refusals(api, tenants)), seconds
    finally:
        for ns in tenants:
            client.AppsV1Api(api).delete_collection_namespaced_deployment(ns)
            core.delete_namespace(ns)


def _preferring(node: str, fallback: str) -> dict[str, Any]:
    term = {"key": "kubernetes.io/hostname", "operator": "In"}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{**term, "values": [node, fallback]}]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [{**term, "values": [node]}]}}
            ],
        }
    }


def _gone(api: Any) -> bool:
    """No tenant namespace left (a round's clean-up is done before the next)."""
    listed = client.CoreV1Api(api).list_namespace().items
    return not [n for n in listed if n.metadata.name.startswith("race-")]


@pytest.mark.timeout(3600)
def test_races_for_a_free_node_by_placement_mode(
    installed: tuple[cluster.SimCluster, Any, str], tmp_path: pathlib.Path
) -> None:
    sim, api, driver_ns = installed
    running = domains.create_domain(api, conftest.NAMESPACE)
    pods = domains.workers(api, conftest.NAMESPACE, running, RUNNING_NODES)
    domains.wait_ready(api, conftest.NAMESPACE, running, pods)
    results: dict[str, dict[str, Any]] = {}
    current: dict[str, str] = {}
    """The values set so far (each upgrade reuses the ones before)."""
    for mode, values in MODES:
        if values:
            current |= dict(v.split("=", 1) for v in values)
            conftest.upgrade(sim, tmp_path, *values)
            binding = current.get("kubeletPlugin.bindingConditions") != "false"
            publishing.republished(api, binding=binding)
        ten, pair = Scene(), Scene()
        for scene, rounds, count, affinity in (
            (ten, TEN_ROUNDS, 10, None),
            (pair, PAIR_ROUNDS, 2, _preferring(TARGET, FALLBACK)),
        ):
            for _ in range(rounds):
                refused, at_prepare, seconds = _round(api, driver_ns, count, affinity)
                scene.races.append(refused + at_prepare)
                scene.at_prepare += at_prepare
                scene.all_running.append(seconds)
                waiting.until("the round's namespaces gone", partial(_gone, api), timeout=120,
                              interval=0.5)  # fmt: skip
        results[mode] = {"ten_at_once": ten.figures(), "two_for_one_node": pair.figures()}
        print(f"\n{mode}: {results[mode]}")
    report.save(
        "races",
        results,
        plots=[
            report.Plot(
                name="races",
                title="Races for a free node per scene (sum over the rounds), by placement mode",
                labels=[m for m, _ in MODES],
                series={
                    "ten at once": [results[m]["ten_at_once"]["races"] for m, _ in MODES],
                    "two for one node": [results[m]["two_for_one_node"]["races"] for m, _ in MODES],
                },
                unit="races",
            )
        ],
    )
    # Every round of every mode ended with each domain's pod Running (none stranded); with
    # binding conditions (turn or everywhere) no pod was ever refused at prepare.
    for mode, scenes in results.items():
        for name, figures in scenes.items():
            if not mode.startswith("device taints alone"):
                assert figures["refused_at_prepare"] == 0, f"{mode}, {name}: {figures}"
