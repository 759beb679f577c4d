"""A fabric fault under a formed ComputeDomain: one that passes reaches no job; one that lasts does.

The chart (values/sim.yaml) has every node's kubelet plugin re-check the node's NVML (the fake
libnvidia-ml.so.1 in its driver root) with node-init's check every ``recheckInterval`` seconds,
with the chart's fault grace; the IMEX agents run the fake nvidia-imex, and the controller
reports the domain's status. A fault is made by breaking the node's topology file (NVML's init
then fails) or by putting its fabric back into registration.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import topology
from computedomains import nodefiles, waiting
from computedomains.api import constants
from tests.support import domains, kube

pytestmark = pytest.mark.cluster

NODES = ["gb200-r0-n05", "gb200-r0-n06"]
FAULTY = NODES[0]
HOLDING = "keeping the last usable verdict"
PASSED = "the fault passed"


def _log(sim: sim_cluster.SimCluster, pod: Any) -> pathlib.Path:
    assert sim.directory is not None
    meta = pod.metadata
    return (
        sim.directory / "logs/pods" / f"{meta.namespace}_{meta.name}_{meta.uid}"
    ) / "kubelet-plugin.log"  # the plugin runs the re-check


def _fabric(api: client.ApiClient, node: str) -> tuple[str | None, str | None]:
    """The node's clique label and its NVLinkFabricReady condition (``status/reason``)."""
    found = client.CoreV1Api(api).read_node(node)
    condition = next(
        (c for c in found.status.conditions or [] if c.type == constants.FABRIC_CONDITION), None
    )
    return (
        (found.metadata.labels or {}).get(constants.CLIQUE_LABEL),
        None if condition is None else f"{condition.status}/{condition.reason}",
    )


def _warnings(api: client.ApiClient, node: str, reason: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(
        "default",
        field_selector=f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}",
    )
    return [str(e.message) for e in events.items if e.type == "Warning"]


def _break_nvml(sim: sim_cluster.SimCluster, node: str) -> None:
    """NVML's init fails on ``node`` (ERROR_UNKNOWN): its topology file stops parsing."""
    nodefiles.write_bytes(sim.host_trees[node].nvml_topology, b"{NVML_ERROR_UNKNOWN")


def test_a_passing_fault_keeps_imex_and_a_sustained_one_degrades_the_node(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    pod = kube.component_pod(api, chart, "kubelet-plugin", FAULTY)
    flags = kube.container_flags(pod, "kubelet-plugin")
    checks = int(flags["--fault-grace-checks"])
    interval = float(flags["--fabric-recheck-interval"])
    assert checks >= 2, f"a grace of {checks} check(s) holds nothing; the test needs two"
    log = _log(sim, pod)

    def said(line: str) -> int:
        return log.read_text().count(line) if log.exists() else 0

    domain = domains.create_domain(api, namespace)
    name = domain["metadata"]["name"]
    pods = domains.workers(api, namespace, domain, NODES)
    domains.wait_ready(api, namespace, domain, pods)
    pid = waiting.until(
        "nvidia-imex on the node", lambda: domains.imex_pid(sim, FAULTY), timeout=60
    )
    clique = next(n.clique for n in sim.nodes if n.name == FAULTY)
    healthy = (clique, "True/FabricHealthy")

    def holds() -> None:
        assert domains.imex_pid(sim, FAULTY) == pid, "nvidia-imex was restarted or stopped"
        assert _fabric(api, FAULTY) == healthy
        status = domains.get_domain(api, namespace, name).get("status") or {}
        assert status.get("status") == "Ready", status

    try:
        # One NVML failure, then a registration in progress again, each shorter than the grace:
        # node-init holds the verdict (and says so), the check passes again, nothing moved.
        for registering in (False, True):
            held, passed = said(HOLDING), said(PASSED)
            if registering:
                sim.set_fabric_profile(FAULTY, topology.FabricProfile.IN_PROGRESS)
            else:
                _break_nvml(sim, FAULTY)
            waiting.until(
                "node-init to hold the verdict through the fault",
                lambda: said(HOLDING) > held,  # noqa: B023
                timeout=10 * interval,
                interval=0.5,
                abort=holds,
            )
            sim.set_fabric_profile(FAULTY, topology.FabricProfile.HEALTHY)
            waiting.until(
                "the fabric check to pass again",
                lambda: said(PASSED) > passed,  # noqa: B023
                timeout=10 * interval,
                interval=0.5,
                abort=holds,
            )
        holds()

        # A failure past the grace degrades the node: the condition and an Event say why.
        _break_nvml(sim, FAULTY)
        waiting.until(
            "the sustained fault to degrade the node",
            lambda: _fabric(api, FAULTY) == (None, "False/FabricDiscoveryFailed"),
            timeout=(checks + 4) * interval,
            interval=0.5,
        )
        (message,) = waiting.until(
            "a Warning Event on the Node",
            lambda: _warnings(api, FAULTY, "NVLinkFabricFaultSustained"),
            timeout=30,
        )
        assert f"failed {checks} times in a row" in message
        assert "FabricDiscoveryFailed" in message
    finally:
        sim.set_fabric_profile(FAULTY, topology.FabricProfile.HEALTHY)
    waiting.until(
        "the node's fabric to be usable again",
        lambda: _fabric(api, FAULTY) == healthy,
        timeout=10 * interval,
        interval=0.5,
    )
    domains.wait_ready(api, namespace, domain, pods)
    domains.delete_pods(api, namespace, name)
