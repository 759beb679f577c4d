"""The simulated GB200 nodes: Node objects and host trees as docs/simulation.md documents them."""

from __future__ import annotations

import collections
import ipaddress
import json
import os
import re
import subprocess
import sys
import uuid
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import fakenvml, hosttree, nodes
from computedomains import waiting
from computedomains.fabric import nvml

pytestmark = pytest.mark.cluster


def _fabric_show(tree: hosttree.HostTree) -> subprocess.Popen[str]:
    """``computedomains fabric show --json`` on a node, as an operator would run it there: a
    process of its own, loading the node's own NVML (pynvml loads one library per process)."""
    return subprocess.Popen(
        [sys.executable, "-m", "computedomains", "fabric", "show", "--json",
         f"--driver-root={tree.root}", f"--proc-root={tree.root / 'proc'}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "NODE_NAME": tree.root.name},
    )  # fmt: skip


def _shown(sim: sim_cluster.SimCluster) -> dict[str, dict[str, Any]]:
    """What every node's NVML reports, node name → ``fabric show --json``, a few at a time."""
    shown: dict[str, dict[str, Any]] = {}
    names = [n.name for n in sim.nodes]
    for start in range(0, len(names), 6):
        running = {name: _fabric_show(sim.host_trees[name]) for name in names[start : start + 6]}
        for name, process in running.items():
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, f"{name}: {err}"
            shown[name] = json.loads(out)
    return shown


def test_two_racks_have_distinct_cluster_uuids_and_eighteen_nodes_per_clique(
    sim: sim_cluster.SimCluster,
) -> None:
    cliques: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    all_gpus: list[str] = []
    for name, shown in _shown(sim).items():
        assert (shown["node"], shown["verdict"]) == (name, "healthy")
        gpus = shown["gpus"]
        assert len(gpus) == 4
        gpu_fabrics = {(g["fabric"]["clusterUuid"], g["fabric"]["cliqueId"]) for g in gpus}
        assert len(gpu_fabrics) == 1, f"{name}: GPUs disagree on the clique: {gpu_fabrics}"
        for gpu in gpus:
            assert gpu["fabric"]["state"] == "COMPLETED"
            assert gpu["fabric"]["status"] == "SUCCESS"
            assert re.fullmatch(r"GPU-[0-9a-f-]{36}", gpu["uuid"])
        cluster_uuid, clique_id = gpu_fabrics.pop()
        assert shown["clique"] == f"{cluster_uuid}.{clique_id}"
        cliques[(cluster_uuid, clique_id)].add(name)
        all_gpus.extend(g["uuid"] for g in gpus)

    assert len(cliques) == 2
    assert len({cluster_uuid for cluster_uuid, _ in cliques}) == 2, (
        "racks must differ by cluster UUID"
    )
    assert sorted(len(members) for members in cliques.values()) == [18, 18]
    for members in cliques.values():
        assert len({name.split("-n")[0] for name in members}) == 1, (
            "a clique spans exactly one rack"
        )
    assert len(set(all_gpus)) == 36 * 4


def test_host_trees_hold_the_driver_and_kubelet_files(sim: sim_cluster.SimCluster) -> None:
    boot_ids = set()
    for node in sim.nodes:
        tree = sim.host_trees[node.name]
        char_devices = tree.proc_devices.read_text().split("Block devices:")[0].splitlines()[1:]
        majors = {name: major for major, name in (line.split() for line in char_devices if line)}
        assert majors["nvidia-caps-imex-channels"] == str(hosttree.IMEX_CHANNELS_MAJOR)
        assert majors["nvidia-caps"] == str(hosttree.NVIDIA_CAPS_MAJOR)
        mgmt = dict(line.split(": ") for line in tree.fabric_imex_mgmt.read_text().splitlines())
        assert mgmt == {"DeviceFileMinor": "1", "DeviceFileMode": "438", "DeviceFileModify": "1"}
        boot_ids.add(str(uuid.UUID(tree.boot_id.read_text().strip())))
        # NVML where the driver installs it: a copy of the built fake (a container sees only
        # the tree), with the node's answers beside it.
        assert nvml.find_library(tree.root) == tree.nvml_library
        assert not tree.nvml_library.is_symlink()
        assert tree.nvml_library.read_bytes() == sim.toolbox.nvml_library().read_bytes()
        assert tree.nvml_topology.read_text() == fakenvml.render(fakenvml.answers(node))
        for directory in (tree.kubelet_plugins, tree.kubelet_registry, tree.cdi):
            assert directory.is_dir()
    assert len(boot_ids) == len(sim.nodes)


def test_node_objects_look_like_gpu_nodes_on_distinct_loopback_addresses(
    sim: sim_cluster.SimCluster, api: client.ApiClient
) -> None:
    by_name = {
        n.metadata.name: n
        for n in client.CoreV1Api(api).list_node(label_selector=f"{nodes.SIM_LABEL}=true").items
    }
    assert set(by_name) == {n.name for n in sim.nodes}
    ips = set()
    for node in sim.nodes:
        obj = by_name[node.name]
        labels = obj.metadata.labels
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["kubernetes.io/arch"] == "arm64"
        assert labels["kubernetes.io/hostname"] == node.name
        assert labels[nodes.RACK_LABEL] == str(node.rack)
        assert obj.status.capacity["nvidia.com/gpu"] == "4"
        internal = [a.address for a in obj.status.addresses if a.type == "InternalIP"]
        assert internal == [node.ip]
        assert ipaddress.ip_address(node.ip).is_loopback
        assert obj.status.node_info.boot_id == sim.host_trees[node.name].boot_id.read_text().strip()
        assert (
            obj.spec.pod_cidr == node.pod_cidr and ipaddress.ip_network(node.pod_cidr).is_loopback
        )
        ips.add(node.ip)
    assert len(ips) == len(sim.nodes)


@pytest.mark.sim
def test_a_heartbeat_renews_the_kubelets_own_conditions_only(sim: sim_cluster.SimCluster) -> None:
    """As a kubelet's heartbeat: another writer's condition keeps its times. The heartbeat is
    rendered from a node up to 45 s old, so renewing every condition it shows would put back
    one removed meanwhile (uninstall removes node-init's)."""
    api = sim.api_client()
    node = sim.nodes[-1].name
    status = f"/api/v1/nodes/{node}/status"
    stamp = "2020-01-01T00:00:00Z"
    foreign = {"type": "ExampleForeign", "status": "True", "reason": "Test", "message": "mine",
               "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}  # fmt: skip

    def conditions() -> dict[str, dict[str, Any]]:
        found = api.get(f"/api/v1/nodes/{node}")["status"]["conditions"]
        return {str(c["type"]): c for c in found}

    api.patch(status, {"status": {"conditions": [foreign]}}, strategic=True)
    try:
        before = conditions()["Ready"]["lastHeartbeatTime"]
        after = waiting.until(
            f"a heartbeat of {node} (every 20 to 45 s)",
            lambda: (c := conditions())["Ready"]["lastHeartbeatTime"] != before and c,
            timeout=90,
            interval=1,
        )
        assert after["ExampleForeign"]["lastHeartbeatTime"] == stamp, after["ExampleForeign"]
    finally:
        gone = {"type": "ExampleForeign", "$patch": "delete"}
        api.patch(status, {"status": {"conditions": [gone]}}, strategic=True)
