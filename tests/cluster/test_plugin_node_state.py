"""The plugin's node state survives crashes, reboots and corruption, and stays idempotent.

These tests drive the plugin's gRPC socket directly (as the kubelet does) to control exactly
when it is killed; flows through the simulated kubelet are in test_plugin_prepare.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from computedomains import waiting
from computedomains.api import constants
from computedomains.kubeletplugin import cdi
from computedomains.sim import cluster as sim_cluster
from tests.support import plugin

pytestmark = pytest.mark.cluster


@pytest.fixture
def node_plugin(
    sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str, tmp_path: pathlib.Path
) -> Iterator[tuple[plugin.PluginProcess, dict[str, Any]]]:
    """A plugin on a node no other test module uses, a READY domain, clean afterwards."""
    plugin.install_crds(api)
    domain = plugin.create_domain(api, namespace, name=f"cd-{uuid.uuid4().hex[:4]}")
    proc = plugin.PluginProcess(sim, sim.nodes[-4].name, tmp_path)
    for leftover in (proc.tree.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json",):
        leftover.unlink(missing_ok=True)
    proc.write_verdict()
    proc.write_imex(domain["metadata"]["uid"])
    boot_id = proc.tree.boot_id.read_text()
    proc.start()
    yield proc, domain
    proc.stop()
    proc.tree.boot_id.write_text(boot_id)  # the node's boot ID is also on its Node object
    client.CoreV1Api(api).patch_node(
        proc.node, {"metadata": {"labels": {constants.COMPUTE_DOMAIN_LABEL: None}}}
    )


def _checkpoint(proc: plugin.PluginProcess) -> dict[str, Any]:
    path = proc.tree.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json"
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _node_label(api: client.ApiClient, node: str) -> str | None:
    labels = client.CoreV1Api(api).read_node(node).metadata.labels or {}
    return labels.get(constants.COMPUTE_DOMAIN_LABEL)


def _claim(
    api: client.ApiClient, proc: plugin.PluginProcess, domain: dict[str, Any], namespace: str
) -> dict[str, str]:
    return plugin.allocated_claim(
        api,
        namespace,
        node=proc.node,
        device="channel-0",
        parameters=plugin.channel_parameters(domain["metadata"]["uid"]),
    )


def test_killed_mid_prepare_and_restarted_leaves_one_claim_and_no_leak(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    uid = domain["metadata"]["uid"]
    proc.write_imex(uid, state="NOT_READY", message="waiting for 17 peers")
    claim = _claim(api, proc, domain, namespace)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(proc.prepare, [claim])
        # The prepare has labelled the node and now waits for IMEX: kill it right there.
        waiting.until(
            "the plugin to label the node while waiting for IMEX",
            lambda: _node_label(api, proc.node) == uid,
            timeout=20,
        )
        assert proc.child is not None
        os.kill(proc.child.pid, signal.SIGKILL)
        with pytest.raises(Exception):  # noqa: B017 - the call dies with the process
            pending.result(timeout=30)
    assert _checkpoint(proc)["claims"][claim["uid"]]["state"] == "PrepareStarted"

    proc.start()
    proc.write_imex(uid)
    answer = proc.prepare([claim]).claims[claim["uid"]]
    assert answer.error == "" and [d.device_name for d in answer.devices] == ["channel-0"]
    again = proc.prepare([claim]).claims[claim["uid"]]
    assert list(again.devices) == list(answer.devices)  # idempotent, same answer
    claims = _checkpoint(proc)["claims"]
    assert list(claims) == [claim["uid"]] and claims[claim["uid"]]["state"] == "PrepareCompleted"
    assert cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()

    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""
    assert _checkpoint(proc)["claims"] == {}
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert _node_label(api, proc.node) is None


def test_concurrent_prepares_of_one_claim_agree(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    claim = _claim(api, proc, domain, namespace)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: proc.prepare([claim]).claims[claim["uid"]], range(8)))
    assert all(a.error == "" for a in answers)
    assert len({tuple(tuple(d.cdi_device_ids) for d in a.devices) for a in answers}) == 1
    assert list(_checkpoint(proc)["claims"]) == [claim["uid"]]
    # Unprepare twice and of a claim the plugin never saw: all succeed.
    unknown = {"namespace": namespace, "name": "never-seen", "uid": str(uuid.uuid4())}
    for batch in ([claim], [claim], [unknown]):
        answer = proc.unprepare(batch)
        assert all(r.error == "" for r in answer.claims.values())


def test_boot_id_change_discards_old_claims(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    claim = _claim(api, proc, domain, namespace)
    assert proc.prepare([claim]).claims[claim["uid"]].error == ""
    proc.stop()
    proc.tree.boot_id.write_text(f"{uuid.uuid4()}\n")
    proc.start()
    document = _checkpoint(proc)
    assert document["claims"] == {} and document["bootID"] == proc.tree.boot_id.read_text().strip()
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    _wait_node_event(api, proc.node, "CheckpointFromEarlierBoot")


def test_corrupt_checkpoint_is_quarantined_and_the_plugin_keeps_serving(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    proc.stop()
    path = proc.tree.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json"
    path.write_text(
        '{"apiVersion": "node.compute-domains/v1", "kind": "PluginCheckpoint", "claims": 7'
    )
    proc.start()
    assert list(path.parent.glob("checkpoint.json.corrupt-*"))
    claim = _claim(api, proc, domain, namespace)
    assert proc.prepare([claim]).claims[claim["uid"]].error == ""
    _wait_node_event(api, proc.node, "CheckpointCorrupt")


def _wait_node_event(api: client.ApiClient, node: str, reason: str) -> None:
    def seen() -> bool:
        items = (
            client.CoreV1Api(api)
            .list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node},reason={reason}"
            )
            .items
        )
        return bool(items)

    waiting.until(f"a {reason} Event on node {node}", seen, timeout=20)


def test_node_without_fabric_prepares_channels_without_device_nodes(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    proc.write_verdict("no-fabric")  # an H100 HGX node, say: no clique, no IMEX to wait for
    proc.write_imex(domain["metadata"]["uid"], state="STOPPED")
    claim = _claim(api, proc, domain, namespace)
    answer = proc.prepare([claim]).claims[claim["uid"]]
    assert answer.error == ""
    assert [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [("channel-0", [])]
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""


def test_daemon_claim_with_a_domain_config_gets_the_domain_identity(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    """Incumbent-style per-domain daemon claims (ComputeDomainDaemonConfig) still work."""
    proc, domain = node_plugin
    uid = domain["metadata"]["uid"]
    parameters = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND,
        "domainID": uid,
    }
    claim = plugin.allocated_claim(
        api,
        namespace,
        node=proc.node,
        device="daemon-0",
        parameters=parameters,
        request="daemon",
        device_class=constants.DAEMON_DEVICE_CLASS,
    )
    answer = proc.prepare([claim]).claims[claim["uid"]]
    assert answer.error == ""
    spec = json.loads(cdi.spec_path(proc.tree.cdi, claim["uid"]).read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert f"COMPUTE_DOMAIN_UUID={uid}" in edits["env"]
    assert f"COMPUTE_DOMAIN_NAME={domain['metadata']['name']}" in edits["env"]
    assert f"COMPUTE_DOMAIN_NAMESPACE={namespace}" in edits["env"]
    assert edits["deviceNodes"][0]["path"] == "/dev/nvidia-caps/nvidia-cap1"
    assert _node_label(api, proc.node) is None  # a daemon claim never joins the node to a domain
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""
