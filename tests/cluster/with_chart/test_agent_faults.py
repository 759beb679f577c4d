"""A killed IMEX agent leaves no stale READY behind: nobody believes it past the freshness bound.

The chart runs every component; the agent's ``nvidia-imex`` (the fake one) dies with the agent.
What the dead agent wrote stays: the node's status file says READY and its pod condition True.
The kubelet plugin stops believing the file once its heartbeat is older than its bound, and
the controller stops believing the condition as soon as the agent container is down (the
simulated kubelet reports the container's real state, and keeps it down while a test asks).
"""

from __future__ import annotations

import datetime
import os
import pathlib
import signal
import time
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import nodefaults
from cdsim.kubelet import node as sim_node
from cdsim.kubelet import runner
from computedomains import waiting
from computedomains.api import constants, imex
from tests.support import domains, kube

pytestmark = pytest.mark.cluster

NODES = ["gb200-r0-n12", "gb200-r0-n13", "gb200-r0-n14"]
VICTIM = NODES[0]


def _agent_pod(api: client.ApiClient, namespace: str) -> Any:
    return kube.component_pod(api, namespace, constants.IMEX_AGENT_COMPONENT, VICTIM)


def _status(path: pathlib.Path) -> imex.ImexStatus:
    status = imex.read_status(path)
    assert status is not None
    return status


def _member(api: client.ApiClient, namespace: str, uid: str) -> str:
    """The victim's ``status`` in the domain's clique."""
    statuses = {
        d["nodeName"]: str(d["status"])
        for c in domains.cliques(api, namespace, uid)
        for d in c["daemons"]
    }
    return statuses.get(VICTIM, "")


def _refusals(api: client.ApiClient, namespace: str, pod: str) -> list[str]:
    """Messages of the plugin's ImexNotReady Events on ``pod``."""
    listing = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod}"
    )
    return [str(e.message) for e in listing.items if e.reason == "ImexNotReady"]


def _agent_pid(sim: sim_cluster.SimCluster) -> int | None:
    """The victim's agent process of this cluster (by its host tree: other simulated clusters
    on the machine, a demo's or another worker's, have nodes of the same names)."""
    return nodefaults.agent_pid(sim.host_trees[VICTIM], VICTIM)


def test_a_killed_agent_is_believed_by_neither_plugin_nor_controller_until_it_restarts(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    plugin = kube.component_pod(api, chart, "kubelet-plugin", VICTIM)
    max_age = float(kube.container_flags(plugin, "kubelet-plugin")["--imex-status-max-age"])
    agent_flags = kube.container_flags(_agent_pod(api, chart), constants.IMEX_AGENT_COMPONENT)
    beat = float(agent_flags["--heartbeat-interval"])
    domain = domains.create_domain(api, namespace)
    name, uid = domain["metadata"]["name"], domain["metadata"]["uid"]
    pods = domains.workers(api, namespace, domain, NODES)
    domains.wait_ready(api, namespace, domain, pods)
    status_file = sim.host_trees[VICTIM].root / "var/run/compute-domains/imex/status.json"
    formed = _status(status_file)
    assert (formed.state, formed.domain_uid) == (imex.State.READY, uid)
    waiting.until(
        "the agent to rewrite its unchanged status (a heartbeat)",
        lambda: (
            (s := _status(status_file)).heartbeat_at != formed.heartbeat_at
            and s.updated_at == formed.updated_at
        ),
        timeout=beat * 3,
        interval=0.2,
    )

    agent = _agent_pod(api, chart)
    hold = (
        sim_node.pod_dir(sim.host_trees[VICTIM].root, agent.metadata.uid)
        / runner.HOLD_DIR
        / imex.AGENT_CONTAINER
    )
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    try:
        pid = _agent_pid(sim)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()

        # The controller: the agent container is down, so its condition (still True) is void.
        waiting.until(
            f"{VICTIM} and the domain to leave Ready",
            lambda: (
                _member(api, chart, uid) != "Ready"
                and domains.get_domain(api, namespace, name)["status"]["status"] != "Ready"
            ),
            timeout=60,
            interval=0.5,
        )
        assert _agent_pid(sim) is None, "kept down"

        # The plugin: the file still says READY, but its heartbeat stopped with the agent.
        stale = waiting.until(
            "the dead agent's status to go stale",
            lambda: imex.staleness(
                _status(status_file), now=datetime.datetime.now(datetime.UTC), max_age=max_age
            ),
            timeout=max_age + 15,
            interval=0.5,
        )
        elapsed = time.monotonic() - killed
        # Fresh until about the bound after the kill (the heartbeat kept it so), stale by then.
        assert max_age / 2 <= elapsed <= max_age + 5, f"stale after {elapsed:.1f}s"
        dead = _status(status_file)
        assert (dead.state, dead.domain_uid, dead.agent) == (imex.State.READY, uid, formed.agent)
        assert "is not running" in stale

        late = domains.create_pod(api, namespace, domain, f"{name}-late", node=VICTIM)
        (refusal, *_) = waiting.until(
            f"the prepare of {late} on {VICTIM} to be refused as not ready",
            lambda: _refusals(api, namespace, late),
            timeout=120,
            interval=1,
        )
        assert "the IMEX status is stale" in refusal and VICTIM in refusal
        phase = client.CoreV1Api(api).read_namespaced_pod(late, namespace).status.phase
        assert phase == "Pending"
    finally:
        hold.unlink(missing_ok=True)

    waiting.until(
        "the agent to be started again",
        lambda: _agent_pid(sim),
        timeout=30,
    )
    domains.wait_ready(api, namespace, domain, [*pods, late])
    back = _status(status_file)
    assert back.agent is not None and formed.agent is not None
    assert back.agent.start_id != formed.agent.start_id, "a new run of the agent"
    assert back.state == imex.State.READY and _member(api, chart, uid) == "Ready"
    domains.delete_pods(api, namespace, name)
