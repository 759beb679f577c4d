"""The kubelet plugin never loses or corrupts its node's state, with the chart installed.

Workloads run on chosen nodes through their ComputeDomain's claim template, so the controller,
the IMEX agents and the plugins are all real. Where a test needs exact timing (a claim deleted
during the IMEX wait) or a claim admission would refuse, it calls the chart's plugin on its DRA
socket directly, as the kubelet does.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import nodefaults
from computedomains import flags, waiting
from computedomains.api import constants
from computedomains.kubeletplugin import cdi, config
from tests.support import domains, kube, plugin

pytestmark = pytest.mark.cluster

RECOVERY_NODE, RACE_NODE, LABEL_NODE = "gb200-r0-n07", "gb200-r0-n08", "gb200-r0-n09"
ROUND_LINE = "collection round:"
"""What the plugin logs at the end of every collection round (``collection.py``)."""


def _dial(sim: sim_cluster.SimCluster, node: str, tmp_path: pathlib.Path) -> plugin.PluginProcess:
    """The chart's plugin on ``node``, reached on its DRA socket (not started by the test)."""
    return plugin.PluginProcess(sim, node, tmp_path)


def _checkpoint_file(sim: sim_cluster.SimCluster, node: str) -> pathlib.Path:
    return sim.host_trees[node].plugin_checkpoint


def _claims_in_checkpoint(sim: sim_cluster.SimCluster, node: str) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(_checkpoint_file(sim, node).read_text())["claims"]
    return claims


def _node_label(api: client.ApiClient, node: str) -> str | None:
    return (client.CoreV1Api(api).read_node(node).metadata.labels or {}).get(
        constants.COMPUTE_DOMAIN_LABEL
    )


def _set_label(api: client.ApiClient, node: str, value: str | None) -> None:
    client.CoreV1Api(api).patch_node(
        node, {"metadata": {"labels": {constants.COMPUTE_DOMAIN_LABEL: value}}}
    )


def _plugin_args(api: client.ApiClient, chart: str) -> argparse.Namespace:
    """The plugin's settings as the chart's DaemonSet passes them."""
    daemonset = (
        client.AppsV1Api(api)
        .list_namespaced_daemon_set(
            chart, label_selector="app.kubernetes.io/component=kubelet-plugin"
        )
        .items[0]
    )
    container = next(
        c for c in daemonset.spec.template.spec.containers if c.name == "kubelet-plugin"
    )
    parser = argparse.ArgumentParser()
    flags.add_to(parser, config.PluginConfig)
    args, _ = parser.parse_known_args([a for a in container.args if a.startswith("--")])
    return args


def _plugin_log(
    api: client.ApiClient, sim: sim_cluster.SimCluster, chart: str, node: str
) -> pathlib.Path:
    """The plugin container's log (appended to across its restarts in the same pod)."""
    pod = next(
        p
        for p in client.CoreV1Api(api)
        .list_namespaced_pod(chart, label_selector="app.kubernetes.io/component=kubelet-plugin")
        .items
        if p.spec.node_name == node
    )
    assert sim.directory is not None
    folder = f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}"
    return sim.directory / "logs" / "pods" / folder / "kubelet-plugin.log"


def _rounds(log: pathlib.Path) -> int:
    return sum(ROUND_LINE in line for line in log.read_text().splitlines())


def _plugin_pid(sim: sim_cluster.SimCluster, node: str) -> int | None:
    """The chart's plugin process for ``node`` of this cluster (by its host tree: other
    simulated clusters on the machine have nodes of the same names)."""
    return nodefaults.plugin_pid(sim.host_trees[node], node)


def _restart_plugin(
    sim: sim_cluster.SimCluster, node: str, tmp_path: pathlib.Path, *, meanwhile: Callable[[], None]
) -> None:
    """Freeze the plugin, run ``meanwhile``, kill it; wait for its restarted successor."""
    pid = _plugin_pid(sim, node)
    assert pid is not None
    nodefaults.kill_frozen(pid, meanwhile)  # frozen, it cannot write its checkpoint any more
    waiting.until(
        f"the simulated kubelet to restart the plugin on {node}",
        lambda: (new := _plugin_pid(sim, node)) is not None and new != pid,
        timeout=60,
    )
    dial = _dial(sim, node, tmp_path)
    waiting.until(
        f"the restarted plugin on {node} to answer",
        lambda: dial.prepare([]) is not None,
        timeout=60,
        retry_on=(grpc.RpcError,),
    )


def _delete_pods(api: client.ApiClient, namespace: str, pods: list[str], node: str) -> None:
    core = client.CoreV1Api(api)
    for name in pods:
        core.delete_namespaced_pod(name, namespace)
    waiting.until(
        f"node {node} to leave the domain once its pods are gone",
        lambda: _node_label(api, node) is None,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("how", "reason"),
    [("corrupt", "CheckpointCorrupt"), ("newer-version", "CheckpointFromNewerVersion")],
)
def test_a_lost_checkpoint_keeps_the_label_and_the_claims_through_three_collection_rounds(
    chart: str,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
    how: str,
    reason: str,
) -> None:
    domain = domains.create_domain(api, namespace)
    uid = domain["metadata"]["uid"]
    pods = domains.workers(api, namespace, domain, [RECOVERY_NODE], per_node=2)
    domains.wait_ready(api, namespace, domain, pods)
    # The label is the controller's copy, written after the status: wait for it once, so the
    # rounds below can hold it to staying put.
    waiting.until(
        f"the controller's label copy on {RECOVERY_NODE}",
        lambda: _node_label(api, RECOVERY_NODE) == uid,
        timeout=30,
    )
    mine = {
        u: e
        for u, e in _claims_in_checkpoint(sim, RECOVERY_NODE).items()
        if e["namespace"] == namespace
    }
    assert [e["state"] for e in mine.values()] == ["PrepareCompleted"] * 2
    path = _checkpoint_file(sim, RECOVERY_NODE)
    quarantined = set(path.parent.glob("checkpoint.json.corrupt-*"))
    log = _plugin_log(api, sim, chart, RECOVERY_NODE)
    rounds: list[int] = []

    def damage() -> None:
        nodefaults.damage_checkpoint(path, how)
        rounds.append(_rounds(log))  # the old plugin is frozen: no round of its own follows

    _restart_plugin(sim, RECOVERY_NODE, tmp_path, meanwhile=damage)

    assert len(set(path.parent.glob("checkpoint.json.corrupt-*")) - quarantined) == 1
    rebuilt = _claims_in_checkpoint(sim, RECOVERY_NODE)
    assert {u: rebuilt.get(u) for u in mine} == mine  # the same entries, devices, CDI IDs
    assert "rebuilt" in kube.node_event(api, RECOVERY_NODE, reason).message
    interval = _plugin_args(api, chart).collection_interval

    def three_rounds() -> bool:
        assert _node_label(api, RECOVERY_NODE) == uid, "the node left the domain"
        return _rounds(log) >= rounds[0] + 3

    waiting.until(
        "three collection rounds of the restarted plugin",
        three_rounds,
        timeout=3 * interval + 60,
        interval=0.5,
    )

    dial = _dial(sim, RECOVERY_NODE, tmp_path)
    core = client.CoreV1Api(api)
    assert all(core.read_namespaced_pod(p, namespace).status.phase == "Running" for p in pods)
    for claim_uid, entry in mine.items():
        assert cdi.spec_path(sim.host_trees[RECOVERY_NODE].cdi, claim_uid).exists()
        ref = {"uid": claim_uid, "namespace": namespace, "name": entry["name"]}
        again = dial.prepare([ref]).claims[claim_uid]  # as a restarted kubelet asks again
        assert again.error == ""
        assert [list(d.cdi_device_ids) for d in again.devices] == [
            d["cdi_ids"] for d in entry["devices"]
        ]

    other = domains.create_domain(api, namespace)
    intruder = plugin.allocated_claim(
        api,
        namespace,
        node=RECOVERY_NODE,
        device="channel-0-s9",
        parameters=plugin.channel_parameters(other["metadata"]["uid"]),
    )
    refused = dial.prepare([intruder]).claims[intruder["uid"]]
    assert "cannot use this node" in refused.error
    assert domain["metadata"]["name"] in refused.error
    client.ResourceV1Api(api).delete_namespaced_resource_claim(intruder["name"], namespace)
    _delete_pods(api, namespace, pods, RECOVERY_NODE)


def test_a_claim_deleted_during_the_imex_wait_gets_nothing_and_frees_the_node(
    chart: str,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    domain = domains.create_domain(api, namespace)
    uid = domain["metadata"]["uid"]
    tree = sim.host_trees[RACE_NODE]
    fault = tree.imex_fault_file
    fault.write_text("bind\n")  # the node's IMEX cannot start: the prepare waits
    claim = plugin.allocated_claim(
        api,
        namespace,
        node=RACE_NODE,
        device="channel-0",
        parameters=plugin.channel_parameters(uid),
    )
    dial = _dial(sim, RACE_NODE, tmp_path)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(dial.prepare, [claim])
        waiting.until(
            "the controller to give the node to the domain (its label) while the prepare waits",
            lambda: _node_label(api, RACE_NODE) == uid,
            timeout=30,
        )
        client.ResourceV1Api(api).delete_namespaced_resource_claim(claim["name"], namespace)
        fault.unlink()  # and IMEX may turn READY now
        answer = pending.result(timeout=60).claims[claim["uid"]]
    assert "was deleted" in answer.error and list(answer.devices) == []
    assert not cdi.spec_path(tree.cdi, claim["uid"]).exists()
    assert claim["uid"] not in _claims_in_checkpoint(sim, RACE_NODE)
    waiting.until(
        "the controller to free the node (its label) once the claim is gone",
        lambda: _node_label(api, RACE_NODE) is None,
        timeout=30,
    )

    other = domains.create_domain(api, namespace)
    taker = domains.create_pod(api, namespace, other, "taker", node=RACE_NODE)
    kube.wait_for_pod(
        api,
        namespace,
        taker,
        "to take the node",
        lambda p: p.status.phase == "Running",
        timeout=120,
    )
    waiting.until(
        "the controller to label the node for the domain that took it",
        lambda: _node_label(api, RACE_NODE) == other["metadata"]["uid"],
        timeout=30,
    )
    _delete_pods(api, namespace, [taker], RACE_NODE)


def test_a_node_label_removed_by_hand_is_put_back_while_the_node_holds_claims(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = domains.create_domain(api, namespace)
    uid = domain["metadata"]["uid"]
    pods = domains.workers(api, namespace, domain, [LABEL_NODE])
    domains.wait_ready(api, namespace, domain, pods)
    _set_label(api, LABEL_NODE, None)
    waiting.until(
        "the controller to put the node label back",
        lambda: _node_label(api, LABEL_NODE) == uid,
        timeout=30,
        interval=0.5,
    )
    domains.wait_ready(api, namespace, domain, pods)
    _delete_pods(api, namespace, pods, LABEL_NODE)


def test_a_daemon_device_claim_in_a_user_namespace_is_refused_by_the_plugin(
    chart: str,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    """The plugin's own refusal, behind the chart's admission policy.

    The policy refuses a claim whose requests name the daemon DeviceClass outside the release
    namespace, at creation. This claim asks for a channel (admitted) and its allocation,
    written by hand, names the node's daemon device: what a scheduler bug or an install from
    before the policy would hand the plugin. The plugin judges the allocated device.
    """
    domain = domains.create_domain(api, namespace)
    parameters = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND,
        "domainID": domain["metadata"]["uid"],
    }
    claim = plugin.allocated_claim(
        api, namespace, node=LABEL_NODE, device="daemon-0", parameters=parameters, request="daemon"
    )
    answer = _dial(sim, LABEL_NODE, tmp_path).prepare([claim]).claims[claim["uid"]]
    assert f"only the IMEX agent in namespace {chart} may use" in answer.error
    assert not cdi.spec_path(sim.host_trees[LABEL_NODE].cdi, claim["uid"]).exists()
    assert claim["uid"] not in _claims_in_checkpoint(sim, LABEL_NODE)

    def refusal_event() -> bool:
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={claim['name']}"
        )
        return "DaemonClaimOutsideDriverNamespace" in {e.reason for e in events.items}

    waiting.until(f"the refusal as an Event on claim {claim['name']}", refusal_event, timeout=30)
