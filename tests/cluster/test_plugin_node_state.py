"""The plugin's node state survives crashes, reboots and corruption, and stays idempotent.

These tests drive the plugin's gRPC socket directly (as the kubelet does) to control exactly
when it is killed; flows through the simulated kubelet are in test_plugin_prepare.py. No
controller runs here: the node's domain label, the controller's copy of its record, is never
written, whatever the plugin prepares.
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

from cdsim import cluster as sim_cluster
from computedomains import waiting
from computedomains.api import constants, models
from computedomains.controller import objects
from computedomains.kubeletplugin import cdi
from tests.support import kube, plugin

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
    api: client.ApiClient,
    proc: plugin.PluginProcess,
    domain: dict[str, Any],
    namespace: str,
    *,
    device: str = "channel-0",
) -> dict[str, str]:
    return plugin.allocated_claim(
        api,
        namespace,
        node=proc.node,
        device=device,
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
        # The prepare has recorded the claim and now waits for IMEX: kill it right there.
        waiting.until(
            "the plugin to record the claim while waiting for IMEX",
            lambda: claim["uid"] in _checkpoint(proc)["claims"],
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
    # Its entry stays as a mark that holds nothing (until the aborted entries' TTL): a late
    # retry of its prepare that read the claim before the unprepare must not take it again.
    mark = _checkpoint(proc)["claims"]
    assert {u: (e["state"], e.get("devices") or []) for u, e in mark.items()} == {
        claim["uid"]: ("PrepareAborted", [])
    }
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert _node_label(api, proc.node) is None
    # A prepare after the unprepare (a new pod of the same claim) is one like any: the mark
    # stops only a prepare that read the claim before it.
    anew = proc.prepare([claim]).claims[claim["uid"]]
    assert anew.error == "" and [d.device_name for d in anew.devices] == ["channel-0"]
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""


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
    kube.node_event(api, proc.node, "CheckpointFromEarlierBoot", timeout=20)


def _damage(path: pathlib.Path, how: str) -> None:
    if how == "corrupt":
        path.write_text(
            '{"apiVersion": "node.compute-domains/v1", "kind": "PluginCheckpoint", "claims": 7'
        )
    elif how == "newer-version":
        document = json.loads(path.read_text())
        path.write_text(json.dumps({**document, "checkpointVersion": 99, "claims": "reshaped"}))
    else:  # unreadable: reading it fails (EISDIR) although it is there
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("corrupt", "CheckpointCorrupt"),
        ("newer-version", "CheckpointFromNewerVersion"),
        ("unreadable", "CheckpointUnreadable"),
    ],
)
def test_a_lost_checkpoint_is_quarantined_and_rebuilt_keeping_the_claims(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]],
    api: client.ApiClient,
    namespace: str,
    how: str,
    reason: str,
) -> None:
    proc, domain = node_plugin
    claim = _claim(api, proc, domain, namespace)
    prepared = proc.prepare([claim]).claims[claim["uid"]]
    assert prepared.error == ""
    before = _checkpoint(proc)["claims"][claim["uid"]]
    proc.stop()
    path = proc.tree.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json"
    quarantined = set(path.parent.glob("checkpoint.json.corrupt-*"))
    _damage(path, how)
    proc.start()

    assert len(set(path.parent.glob("checkpoint.json.corrupt-*")) - quarantined) == 1
    assert _checkpoint(proc)["claims"] == {claim["uid"]: before}  # rebuilt as it was
    assert cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    event = kube.node_event(api, proc.node, reason, timeout=20)
    assert (
        "rebuilt 1 claims" in event.message and "moved to checkpoint.json.corrupt-" in event.message
    )
    again = proc.prepare([claim]).claims[claim["uid"]]
    assert again.error == "" and list(again.devices) == list(prepared.devices)

    other = plugin.create_domain(api, namespace, name=f"cd-{uuid.uuid4().hex[:4]}")
    intruder = _claim(api, proc, other, namespace, device="channel-0-s1")
    refused = proc.prepare([intruder]).claims[intruder["uid"]]
    assert "cannot use this node" in refused.error and domain["metadata"]["name"] in refused.error
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""
    assert _node_label(api, proc.node) is None


def test_a_claim_is_refused_while_the_record_gives_the_node_to_another_domain(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]],
    api: client.ApiClient,
    namespace: str,
    sim: sim_cluster.SimCluster,
) -> None:
    proc, domain = node_plugin
    clique = next(n.clique for n in sim.nodes if n.name == proc.node)
    assert clique is not None
    holder = plugin.create_domain(api, namespace, name=f"cd-{uuid.uuid4().hex[:4]}")
    holder_uid = holder["metadata"]["uid"]
    daemon = models.CliqueDaemon(node_name=proc.node, ip_address="10.0.0.1", clique_id=clique,
                                 index=0, status=models.Status.NOT_READY)  # fmt: skip
    record = objects.clique_object(namespace="default", uid=holder_uid, clique=clique,
                                   daemons=(daemon,), members=frozenset({proc.node}))  # fmt: skip
    custom = client.CustomObjectsApi(api)
    group, version, plural = constants.GROUP, constants.STORAGE_VERSION, constants.CLIQUE_PLURAL
    custom.create_namespaced_custom_object(group, version, "default", plural, record)
    try:
        claim = _claim(api, proc, domain, namespace)

        def refused() -> str:
            answer = proc.prepare([claim]).claims[claim["uid"]]
            return answer.error if "cannot use this node" in answer.error else ""

        message = waiting.until("the prepare refused while the record names the holder", refused,
                                timeout=20)  # fmt: skip
        assert holder["metadata"]["name"] in message
        assert claim["uid"] not in _checkpoint(proc)["claims"]  # nothing recorded, nothing held
    finally:
        custom.delete_namespaced_custom_object(
            group, version, "default", plural, record["metadata"]["name"]
        )
    proc.write_imex(domain["metadata"]["uid"])
    answer = waiting.until(
        "the claim prepared once the record names nobody",
        lambda: (a := proc.prepare([claim]).claims[claim["uid"]]).error == "" and a,
        timeout=20,
    )  # fmt: skip
    assert [d.device_name for d in answer.devices] == ["channel-0"]
    assert _node_label(api, proc.node) is None  # the plugin writes no label
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""


def _prepare_waiting_for_imex(
    pool: concurrent.futures.ThreadPoolExecutor,
    proc: plugin.PluginProcess,
    api: client.ApiClient,
    claim: dict[str, str],
    uid: str,
) -> concurrent.futures.Future[Any]:
    proc.write_imex(uid, state="NOT_READY", message="waiting for 17 peers")
    pending = pool.submit(proc.prepare, [claim])
    waiting.until(
        "the plugin to record the claim while waiting for IMEX",
        lambda: claim["uid"] in _checkpoint(proc)["claims"],
        timeout=20,
    )
    return pending


def test_a_claim_deleted_while_its_prepare_waits_gets_nothing_and_frees_the_node(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    uid = domain["metadata"]["uid"]
    claim = _claim(api, proc, domain, namespace)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = _prepare_waiting_for_imex(pool, proc, api, claim, uid)
        client.ResourceV1Api(api).delete_namespaced_resource_claim(claim["name"], namespace)
        proc.write_imex(uid)  # IMEX turns READY right after: the prepare must still fail
        answer = pending.result(timeout=45).claims[claim["uid"]]
    assert "was deleted" in answer.error and list(answer.devices) == []
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert _checkpoint(proc)["claims"] == {}
    assert _node_label(api, proc.node) is None

    other = plugin.create_domain(api, namespace, name=f"cd-{uuid.uuid4().hex[:4]}")
    proc.write_imex(other["metadata"]["uid"])
    taker = _claim(api, proc, other, namespace)
    assert proc.prepare([taker]).claims[taker["uid"]].error == ""
    assert proc.unprepare([taker]).claims[taker["uid"]].error == ""


def test_a_claim_unprepared_while_its_prepare_waits_gets_nothing_and_a_new_prepare_may(
    node_plugin: tuple[plugin.PluginProcess, dict[str, Any]], api: client.ApiClient, namespace: str
) -> None:
    proc, domain = node_plugin
    uid = domain["metadata"]["uid"]
    claim = _claim(api, proc, domain, namespace)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = _prepare_waiting_for_imex(pool, proc, api, claim, uid)
        assert proc.unprepare([claim]).claims[claim["uid"]].error == ""
        answer = pending.result(timeout=45).claims[claim["uid"]]
    assert "was unprepared while it was being prepared" in answer.error
    assert not cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert _checkpoint(proc)["claims"][claim["uid"]]["state"] == "PrepareAborted"
    assert _node_label(api, proc.node) is None
    # The kubelet asks again only for a pod that needs the claim: a prepare sent after the
    # unprepare reads the claim after it, and starts anew (Ledger.start).
    proc.write_imex(uid)
    anew = proc.prepare([claim]).claims[claim["uid"]]
    assert anew.error == "" and cdi.spec_path(proc.tree.cdi, claim["uid"]).exists()
    assert proc.unprepare([claim]).claims[claim["uid"]].error == ""


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
    """Incumbent-style per-domain daemon claims (ComputeDomainDaemonConfig) still work.

    Only in the driver's namespace (``--namespace=default`` here), where the IMEX agent runs.
    """
    proc, domain = node_plugin
    uid = domain["metadata"]["uid"]
    parameters = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND,
        "domainID": uid,
    }

    def daemon_claim(where: str) -> dict[str, str]:
        return plugin.allocated_claim(
            api,
            where,
            node=proc.node,
            device="daemon-0",
            parameters=parameters,
            request="daemon",
            device_class=constants.DAEMON_DEVICE_CLASS,
        )

    refused = daemon_claim(namespace)
    answer = proc.prepare([refused]).claims[refused["uid"]]
    assert "only the IMEX agent in namespace default may use" in answer.error
    assert not cdi.spec_path(proc.tree.cdi, refused["uid"]).exists()

    claim = daemon_claim("default")
    try:
        answer = proc.prepare([claim]).claims[claim["uid"]]
        assert answer.error == ""
        spec = json.loads(cdi.spec_path(proc.tree.cdi, claim["uid"]).read_text())
        edits = spec["devices"][0]["containerEdits"]
        assert f"COMPUTE_DOMAIN_UUID={uid}" in edits["env"]
        assert f"COMPUTE_DOMAIN_NAME={domain['metadata']['name']}" in edits["env"]
        assert f"COMPUTE_DOMAIN_NAMESPACE={namespace}" in edits["env"]
        assert edits["deviceNodes"][0]["path"] == "/dev/nvidia-caps/nvidia-cap1"
        assert (
            _node_label(api, proc.node) is None
        )  # a daemon claim never joins the node to a domain
        assert proc.unprepare([claim]).claims[claim["uid"]].error == ""
    finally:
        client.ResourceV1Api(api).delete_namespaced_resource_claim(claim["name"], "default")
