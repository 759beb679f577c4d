"""node-init on simulated nodes: clique label, fabric condition and taint follow the fabric.

node-init runs as the chart runs it, a process per node: each loads the node's own NVML (the
fake libnvidia-ml.so.1 in the node's driver root), which answers from the node's topology file.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from cdsim import cluster as sim_cluster
from cdsim import topology
from computedomains import nodefiles, waiting
from computedomains.api import constants, fabricverdict, models, resources
from computedomains.api.fabricverdict import VerdictKind
from computedomains.controller import objects
from computedomains.kube import client as kube_client
from computedomains.kube import nodes as kube_nodes
from tests.support import clusters, plugin

pytestmark = pytest.mark.cluster


@pytest.fixture
def api(cluster: clusters.TestCluster) -> kube_client.Client:
    """This module drives node-init's own client (the project's), not the generated one."""
    return kube_client.Client.from_kubeconfig(cluster.kubeconfig)


# Nodes at the end of the second rack: other tests pick nodes from the front.
HOLD_NODE = "gb200-r1-n13"
RECORD_NAMESPACE = "default"
"""Where the hold test writes the clique object that names its node (node-init's --namespace)."""
RECORD_DOMAIN = "6a3c1c0e-0000-4000-8000-00000000d0d0"
ONCE_NODE = "gb200-r1-n15"
WATCH_NODE = "gb200-r1-n16"
NO_FABRIC_NODE = "gb200-r1-n17"
TAINT = kube_nodes.Taint(constants.FABRIC_TAINT, "NoSchedule")


def _verdict_file(sim: sim_cluster.SimCluster, node: str) -> pathlib.Path:
    return sim.host_trees[node].root / "var/run/compute-domains/fabric-verdict.json"


def _set_profile(sim: sim_cluster.SimCluster, node: str, profile: topology.FabricProfile) -> None:
    sim.set_fabric_profile(node, profile)


def _clique(sim: sim_cluster.SimCluster, node: str) -> str:
    clique = next(n for n in sim.nodes if n.name == node).clique
    assert clique is not None
    return clique


@pytest.fixture
def restore(
    sim: sim_cluster.SimCluster, api: kube_client.Client
) -> Iterator[Callable[[str], None]]:
    """Call with a node name before changing it; the node is put back after the test."""
    saved: dict[str, bytes | None] = {}

    def remember(node: str) -> None:
        path = _verdict_file(sim, node)
        saved[node] = path.read_bytes() if path.exists() else None

    yield remember
    for node, verdict in saved.items():
        _set_profile(sim, node, topology.FabricProfile.HEALTHY)
        kube_nodes.patch_labels(api, node, {constants.CLIQUE_LABEL: None})
        kube_nodes.remove_condition(api, node, constants.FABRIC_CONDITION)
        kube_nodes.set_taint(api, node, TAINT.key, TAINT.effect, present=False)
        path = _verdict_file(sim, node)
        if verdict is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(verdict)


def _node_init(sim: sim_cluster.SimCluster, node: str, *args: str) -> list[str]:
    """The command line of node-init on ``node``: its host tree as the driver root and /proc."""
    tree = sim.host_trees[node]
    return [
        sys.executable, "-m", "computedomains", "node-init",
        "--node-name", node,
        "--kubeconfig", str(sim.kubeconfig),
        "--driver-root", str(tree.root),
        "--proc-root", str(tree.root / "proc"),
        "--fabric-verdict-file", str(_verdict_file(sim, node)),
        *args,
    ]  # fmt: skip


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}


def _run_once(sim: sim_cluster.SimCluster, node: str, *, taint_broken: bool = True) -> list[str]:
    """node-init once, as the init container runs it; its output lines."""
    taint = "--taint-broken" if taint_broken else "--no-taint-broken"
    done = subprocess.run(
        _node_init(sim, node, "--transitional-grace", "0", taint),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False,
        env=_environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    return done.stdout.splitlines()


def test_node_init_labels_a_healthy_node_and_fixes_a_stale_label(
    sim: sim_cluster.SimCluster, api: kube_client.Client, restore: Callable[[str], None]
) -> None:
    restore(ONCE_NODE)
    kube_nodes.patch_labels(api, ONCE_NODE, {constants.CLIQUE_LABEL: "stale.1"})
    _run_once(sim, ONCE_NODE)

    node = kube_nodes.get(api, ONCE_NODE)
    assert node.labels[constants.CLIQUE_LABEL] == _clique(sim, ONCE_NODE)
    condition = node.condition(constants.FABRIC_CONDITION)
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "FabricHealthy")
    assert TAINT not in node.taints
    stored = fabricverdict.read(_verdict_file(sim, ONCE_NODE))
    assert stored is not None
    assert (stored.node, stored.verdict) == (ONCE_NODE, VerdictKind.HEALTHY)
    assert stored.clique == _clique(sim, ONCE_NODE)

    # A second run finds nothing to change.
    assert not [line for line in _run_once(sim, ONCE_NODE) if ONCE_NODE in line]


def test_broken_fabric_without_tainting_only_sets_the_condition(
    sim: sim_cluster.SimCluster, api: kube_client.Client, restore: Callable[[str], None]
) -> None:
    restore(ONCE_NODE)
    _set_profile(sim, ONCE_NODE, topology.FabricProfile.FAILED)
    _run_once(sim, ONCE_NODE, taint_broken=False)
    node = kube_nodes.get(api, ONCE_NODE)
    condition = node.condition(constants.FABRIC_CONDITION)
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "FabricRegistrationFailed")
    assert constants.CLIQUE_LABEL not in node.labels
    assert TAINT not in node.taints


def _node_state(api: kube_client.Client, name: str) -> tuple[str | None, str | None, bool]:
    node = kube_nodes.get(api, name)
    condition = node.condition(constants.FABRIC_CONDITION)
    return (
        node.labels.get(constants.CLIQUE_LABEL),
        None if condition is None else f"{condition.status}/{condition.reason}",
        TAINT in node.taints,
    )


def test_watching_node_init_follows_the_fabric_into_broken_and_back(
    sim: sim_cluster.SimCluster,
    api: kube_client.Client,
    restore: Callable[[str], None],
    tmp_path: pathlib.Path,
) -> None:
    restore(WATCH_NODE)
    clique = _clique(sim, WATCH_NODE)
    command = _node_init(sim, WATCH_NODE, "--taint-broken", "--watch", "--recheck-interval", "0.3")
    log = (tmp_path / "node-init.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_environment())

    def alive() -> None:
        if process.poll() is not None:
            raise AssertionError(f"node-init exited: {(tmp_path / 'node-init.log').read_text()}")

    def state_is(wanted: tuple[str | None, str | None, bool]) -> Callable[[], bool]:
        return lambda: _node_state(api, WATCH_NODE) == wanted

    try:
        healthy = (clique, "True/FabricHealthy", False)
        waiting.until("the healthy verdict", state_is(healthy), timeout=30, abort=alive)
        _set_profile(sim, WATCH_NODE, topology.FabricProfile.FAILED)
        broken = (None, "False/FabricRegistrationFailed", True)
        waiting.until("the broken verdict and taint", state_is(broken), timeout=30, abort=alive)
        _set_profile(sim, WATCH_NODE, topology.FabricProfile.HEALTHY)
        waiting.until("the taint to go again", state_is(healthy), timeout=30, abort=alive)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "node-init.log").read_text()


def test_node_without_fabric_is_left_untouched(
    sim: sim_cluster.SimCluster, api: kube_client.Client, restore: Callable[[str], None]
) -> None:
    restore(NO_FABRIC_NODE)
    _set_profile(sim, NO_FABRIC_NODE, topology.FabricProfile.NO_FABRIC)
    # Start from a node nothing of ours touched (a chart installed earlier in the session ran
    # node-init on every node; a stale clique label would rightly be removed).
    kube_nodes.patch_labels(api, NO_FABRIC_NODE, {constants.CLIQUE_LABEL: None})
    kube_nodes.remove_condition(api, NO_FABRIC_NODE, constants.FABRIC_CONDITION)
    before = kube_nodes.get(api, NO_FABRIC_NODE)
    lines = _run_once(sim, NO_FABRIC_NODE)
    after = kube_nodes.get(api, NO_FABRIC_NODE)
    assert after.labels == before.labels
    assert constants.CLIQUE_LABEL not in after.labels
    assert after.condition(constants.FABRIC_CONDITION) is None
    assert after.taints == before.taints
    assert not [line for line in lines if NO_FABRIC_NODE in line], lines
    stored = fabricverdict.read(_verdict_file(sim, NO_FABRIC_NODE))
    assert stored is not None and stored.verdict is VerdictKind.NO_FABRIC


def _break_nvml(sim: sim_cluster.SimCluster, node: str) -> None:
    """Make the node's NVML fail: its topology file stops parsing, so init answers UNKNOWN."""
    nodefiles.write_bytes(sim.host_trees[node].nvml_topology, b"{NVML_ERROR_UNKNOWN")


def _warnings(api: kube_client.Client, node: str, reason: str) -> list[str]:
    selector = f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}"
    listing = api.get("/api/v1/namespaces/default/events", query={"fieldSelector": selector})
    return [e["message"] for e in listing.get("items", []) if e.get("type") == "Warning"]


def _published(sim: sim_cluster.SimCluster, node: str) -> tuple[str, str, str] | None:
    stored = fabricverdict.read(_verdict_file(sim, node))
    return None if stored is None else (stored.verdict, stored.reason, stored.clique)


def test_watching_node_init_holds_a_usable_verdict_through_a_passing_fault(
    sim: sim_cluster.SimCluster,
    cluster: clusters.TestCluster,
    api: kube_client.Client,
    restore: Callable[[str], None],
    tmp_path: pathlib.Path,
) -> None:
    restore(HOLD_NODE)
    clique = _clique(sim, HOLD_NODE)
    grace = fabricverdict.Grace(checks=20, seconds=600)
    log_file = tmp_path / "node-init.log"
    command = _node_init(
        sim, HOLD_NODE,
        "--fault-grace-checks", str(grace.checks), "--fault-grace-seconds", str(grace.seconds),
        "--namespace", RECORD_NAMESPACE, "--watch", "--recheck-interval", "0.3",
    )  # fmt: skip

    def said(text: str) -> int:
        return log_file.read_text().count(text) if log_file.exists() else 0

    healthy = (clique, "True/FabricHealthy", False)
    usable = (VerdictKind.HEALTHY, "FabricHealthy", clique)

    def unchanged() -> None:
        assert process.poll() is None, log_file.read_text()
        assert _node_state(api, HOLD_NODE) == healthy, log_file.read_text()
        assert _published(sim, HOLD_NODE) == usable, log_file.read_text()

    # The record names the node a member (the clique object, as the controller writes it);
    # the node carries no domain label: the grace asks the record, not its copy.
    plugin.install_crds(cluster.api())
    record = objects.clique_object(
        namespace=RECORD_NAMESPACE, uid=RECORD_DOMAIN, clique=clique, daemons=(),
        members=[HOLD_NODE],
    )  # fmt: skip
    record_path = resources.CLIQUES.path(
        models.clique_name(RECORD_DOMAIN, clique), namespace=RECORD_NAMESPACE
    )
    api.create(resources.CLIQUES.path(namespace=RECORD_NAMESPACE), record)
    log = log_file.open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_environment())
    try:
        waiting.until(
            "the healthy verdict", lambda: _node_state(api, HOLD_NODE) == healthy, timeout=30
        )
        # One NVML failure, then a registration in progress again: each is held, then passes.
        for registering in (False, True):
            held, passed = said("keeping the last usable verdict"), said("the fault passed")
            if registering:
                _set_profile(sim, HOLD_NODE, topology.FabricProfile.IN_PROGRESS)
            else:
                _break_nvml(sim, HOLD_NODE)
            waiting.until(
                "node-init to hold the verdict through the fault",
                lambda: said("keeping the last usable verdict") > held,  # noqa: B023
                timeout=30,
                abort=unchanged,
            )
            _set_profile(sim, HOLD_NODE, topology.FabricProfile.HEALTHY)
            waiting.until(
                "the fault to pass",
                lambda: said("the fault passed") > passed,  # noqa: B023
                timeout=30,
                abort=unchanged,
            )
        unchanged()

        # A failure that lasts past the grace degrades the node, with a Warning Event.
        _break_nvml(sim, HOLD_NODE)
        broken = (None, "False/FabricDiscoveryFailed", False)
        waiting.until(
            "the sustained fault to degrade the node",
            lambda: _node_state(api, HOLD_NODE) == broken,
            timeout=120,
        )
        (message,) = waiting.until(
            "the Warning Event on the Node",
            lambda: _warnings(api, HOLD_NODE, "NVLinkFabricFaultSustained"),
            timeout=30,
        )
        assert f"failed {grace.checks} times in a row" in message
        assert _published(sim, HOLD_NODE) == (VerdictKind.BROKEN, "FabricDiscoveryFailed", "")

        # Off any domain nothing is held: the next fault shows at once.
        _set_profile(sim, HOLD_NODE, topology.FabricProfile.HEALTHY)
        waiting.until(
            "the healthy verdict again", lambda: _node_state(api, HOLD_NODE) == healthy, timeout=30
        )
        members = {constants.CLIQUE_MEMBERS_ANNOTATION: models.clique_members_value(())}
        api.patch(record_path, {"metadata": {"annotations": members}})  # it left the domain
        held = said("keeping the last usable verdict")
        _break_nvml(sim, HOLD_NODE)
        waiting.until(
            "the fault to show on a node off any domain",
            lambda: _warnings(api, HOLD_NODE, "NVLinkFabricUnusable"),
            timeout=30,
        )
        # The Event comes first, then the node's label and condition (separate writes).
        waiting.until(
            "the node off any domain to show the fault",
            lambda: _node_state(api, HOLD_NODE) == broken,
            timeout=30,
        )
        assert said("keeping the last usable verdict") == held
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        log.close()
        if api.find(record_path) is not None:
            api.delete(record_path)
    assert code == 0, log_file.read_text()
