"""The kubelet plugin as the chart runs it, prepared and unprepared by the simulated kubelet.

The chart (values/sim.yaml) is installed once for the module: the simulated kubelet runs
node-init and the plugin on every simulated node from the image, with their own
ServiceAccount tokens and the chart's arguments. Workload pods use ResourceClaimTemplates like
the ones the controller will create; the tests write each node's IMEX status as the IMEX
agent will.
"""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import processes, topology
from computedomains import waiting
from computedomains.api import constants
from tests.chart import rendering
from tests.support import kube, plugin

pytestmark = pytest.mark.cluster
DEVICES = rendering.profile_value("kubeletPlugin.channelSlots") + 1
"""What each node's slice lists: the profile's channel slots and the daemon device."""

CHANNEL_NODE, MULTI_NODE, DAEMON_NODE, KILL_NODE, ALL_NODE = (f"gb200-r0-n1{i}" for i in range(5))


def _slices(api: client.ApiClient) -> list[Any]:
    return kube.driver_slices(api)


def _domain(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    plugin.install_crds(api)
    return plugin.create_domain(api, namespace, name=f"cd-{uuid.uuid4().hex[:5]}")


def _template(
    api: client.ApiClient, namespace: str, name: str, *, daemon: bool = False, **parameters: Any
) -> None:
    device_class = constants.DAEMON_DEVICE_CLASS if daemon else constants.CHANNEL_DEVICE_CLASS
    request = "daemon" if daemon else "channel"
    kind = constants.DAEMON_CONFIG_KIND if daemon else constants.CHANNEL_CONFIG_KIND
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": request, "exactly": {"deviceClassName": device_class}}
                        ],
                        "config": [
                            {
                                "requests": [request],
                                "opaque": {
                                    "driver": constants.DRIVER_NAME,
                                    "parameters": {
                                        "apiVersion": constants.API_VERSION,
                                        "kind": kind,
                                        **parameters,
                                    },
                                },
                            }
                        ],
                    }
                }
            },
        },
    )


def _pod(api: client.ApiClient, namespace: str, name: str, *, node: str, template: str) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}],
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.37",
                        "command": ["sleep", "3600"],
                        "resources": {"claims": [{"name": "imex"}]},
                    }
                ],
            },
        },
    )


def _running(api: client.ApiClient, namespace: str, name: str) -> Any:
    return kube.wait_for_pod(
        api,
        namespace,
        name,
        "to be prepared and Running",
        lambda p: p.status.phase == "Running",
        timeout=90,
    )


def _cdi_devices(sim: sim_cluster.SimCluster, pod: Any) -> dict[str, Any]:
    path = sim.host_trees[pod.spec.node_name].root / "pods" / pod.metadata.uid / "cdi-devices.json"
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def _node_domain(api: client.ApiClient, node: str) -> str | None:
    return (client.CoreV1Api(api).read_node(node).metadata.labels or {}).get(
        constants.COMPUTE_DOMAIN_LABEL
    )


def _warning(api: client.ApiClient, namespace: str, pod: str, needle: str) -> str:
    def found() -> str | None:
        for event in (
            client.CoreV1Api(api)
            .list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
            .items
        ):
            if event.type == "Warning" and needle in (event.message or ""):
                return str(event.message)
        return None

    return waiting.until(f"a Warning Event on pod {pod} mentioning {needle!r}", found, timeout=60)


def _unschedulable(api: client.ApiClient, namespace: str, pod: str) -> None:
    def failed() -> bool:
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={pod},reason=FailedScheduling"
        )
        return any("cannot allocate all claims" in (e.message or "") for e in events.items)

    waiting.until(f"the scheduler to find no node for pod {pod}", failed, timeout=60)
    assert not client.CoreV1Api(api).read_namespaced_pod(pod, namespace).spec.node_name


def _delete_pod(api: client.ApiClient, namespace: str, name: str) -> None:
    core = client.CoreV1Api(api)
    core.delete_namespaced_pod(name, namespace)

    def gone() -> bool:
        return not any(p.metadata.name == name for p in core.list_namespaced_pod(namespace).items)

    waiting.until(f"pod {namespace}/{name} to be gone", gone, timeout=60)


def test_every_node_publishes_its_devices_and_clique(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient
) -> None:
    by_node = {s.spec.node_name: s for s in _slices(api)}
    for node in sim.nodes:
        published = by_node[node.name]
        names = [d.name for d in published.spec.devices]
        assert names[0] == "channel-0" and names[-1] == "daemon-0" and len(names) == DEVICES
        assert published.spec.pool.name == node.name
        assert published.metadata.owner_references[0].kind == "Node"
        attributes = published.spec.devices[1].attributes
        assert attributes["type"].string == "channel" and attributes["id"].int == 0
        assert attributes["clique"].string == node.clique


def test_channel_claim_waits_for_imex_then_gets_channel_zero_and_unprepare_cleans_up(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = _domain(api, namespace)
    uid = domain["metadata"]["uid"]
    _template(api, namespace, "imex", domainID=uid)
    fault = _inject_imex_fault(sim, CHANNEL_NODE, "bind")
    _pod(api, namespace, "worker", node=CHANNEL_NODE, template="imex")
    message = _warning(api, namespace, "worker", "is not ready on node")
    assert domain["metadata"]["name"] in message
    assert "FAILED" in message  # IMEX's own state and error text reach the user
    assert _node_domain(api, CHANNEL_NODE) == uid  # the node joined the domain; IMEX started

    fault.unlink()  # IMEX can bind again: the agent's next restart succeeds
    pod = _running(api, namespace, "worker")
    nodes = _cdi_devices(sim, pod)["containers"]["main"]["containerEdits"]["deviceNodes"]
    assert nodes == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "type": "c",
            "major": 235,
            "minor": 0,
            "fileMode": 438,
        }
    ]

    claim_uid = _cdi_devices(sim, pod)["claims"][0]["uid"]
    _delete_pod(api, namespace, "worker")
    waiting.until(
        "the node to leave the domain", lambda: _node_domain(api, CHANNEL_NODE) is None, timeout=60
    )
    assert not list(sim.host_trees[CHANNEL_NODE].cdi.glob(f"*{claim_uid}*"))


def test_allocation_mode_all_injects_every_channel(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = _domain(api, namespace)
    uid = domain["metadata"]["uid"]
    _template(api, namespace, "imex-all", domainID=uid, allocationMode="All")
    _pod(api, namespace, "all", node=ALL_NODE, template="imex-all")
    nodes = _cdi_devices(sim, _running(api, namespace, "all"))["containerEdits"]["deviceNodes"]
    assert [n["minor"] for n in nodes] == list(range(2048))
    _delete_pod(api, namespace, "all")


def test_several_pods_of_one_domain_share_a_node_and_another_domain_is_refused(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    first, second = _domain(api, namespace), _domain(api, namespace)
    _template(api, namespace, "first", domainID=first["metadata"]["uid"])
    _template(api, namespace, "second", domainID=second["metadata"]["uid"])
    for i in range(3):
        _pod(api, namespace, f"rank-{i}", node=MULTI_NODE, template="first")
    devices = set()
    for i in range(3):
        pod = _running(api, namespace, f"rank-{i}")
        claim = client.ResourceV1Api(api).read_namespaced_resource_claim(
            pod.status.resource_claim_statuses[0].resource_claim_name, namespace
        )
        devices |= {r.device for r in claim.status.allocation.devices.results}
        channel = _cdi_devices(sim, pod)["containerEdits"]["deviceNodes"]
        assert [n["path"] for n in channel] == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert len(devices) == 3, devices  # three distinct channel slots, all IMEX channel 0

    # The scheduler sees the node's hold (its devices are tainted for the first domain): the
    # intruder is never bound there, so never prepared (docs/placement.md). The plugin's own
    # refusal, the last line of defence, is tested where a claim is allocated by hand
    # (test_plugin_node_state.py, test_plugin_recovery.py).
    _pod(api, namespace, "intruder", node=MULTI_NODE, template="second")
    _unschedulable(api, namespace, "intruder")
    assert _node_domain(api, MULTI_NODE) == first["metadata"]["uid"]
    for i in range(3):
        _delete_pod(api, namespace, f"rank-{i}")
    # Once the first domain's pods are gone, the second one gets the node.
    _running(api, namespace, "intruder")
    _delete_pod(api, namespace, "intruder")


def test_claims_from_another_namespace_or_with_unknown_fields_are_refused_with_the_reason(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = _domain(api, namespace)
    other = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": other}})
    kube.wait_for_default_service_account(api, other)
    try:
        _template(api, other, "borrowed", domainID=domain["metadata"]["uid"])
        _pod(api, other, "thief", node=CHANNEL_NODE, template="borrowed")
        assert "only use a ComputeDomain of its own namespace" in _warning(
            api, other, "thief", "namespace"
        )
    finally:
        client.CoreV1Api(api).delete_namespace(other)
    _template(api, namespace, "typo", domainID=domain["metadata"]["uid"], allocatonMode="All")
    _pod(api, namespace, "typo", node=CHANNEL_NODE, template="typo")
    assert "allocatonMode" in _warning(api, namespace, "typo", "invalid opaque config")


def test_imex_agent_daemon_claim_gets_the_management_device(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient
) -> None:
    pods = (
        client.CoreV1Api(api)
        .list_namespaced_pod(chart, label_selector="app.kubernetes.io/component=imex-agent")
        .items
    )
    agent = next(p for p in pods if p.spec.node_name == DAEMON_NODE)
    edits = _cdi_devices(sim, _running(api, chart, agent.metadata.name))["containerEdits"]
    node = next(n for n in sim.nodes if n.name == DAEMON_NODE)
    assert f"CLIQUE_ID={node.clique}" in edits["env"]
    assert not any(e.startswith("COMPUTE_DOMAIN_UUID=") for e in edits["env"])  # long-lived agent
    assert edits["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps/nvidia-cap1",
            "type": "c",
            "major": 236,
            "minor": 1,
            "fileMode": 438,
        }
    ]
    assert edits["mounts"][0]["containerPath"] == "/imexd"


def _inject_imex_fault(sim: sim_cluster.SimCluster, node: str, fault: str) -> pathlib.Path:
    """Make the node's (fake) nvidia-imex fail as told until the returned file is removed."""
    path = sim.host_trees[node].root / "var/run/compute-domains/imex/fail"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{fault}\n")
    return path


def _plugin_pid(sim: sim_cluster.SimCluster, node: str) -> int | None:
    root = sim.host_trees[node].root
    return kube.find_process("kubelet-plugin", f"--node-name={node}", under=root)


def test_plugin_killed_mid_prepare_is_restarted_and_finishes_without_duplicates(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    domain = _domain(api, namespace)
    uid = domain["metadata"]["uid"]
    tree = sim.host_trees[KILL_NODE]
    fault = _inject_imex_fault(sim, KILL_NODE, "bind")
    _template(api, namespace, "imex", domainID=uid)
    _pod(api, namespace, "survivor", node=KILL_NODE, template="imex")
    _warning(api, namespace, "survivor", "is not ready on node")
    killed = _plugin_pid(sim, KILL_NODE)
    assert killed is not None
    processes.stop_pids([killed], grace=0)  # SIGTERM then SIGKILL, by PID
    waiting.until(
        "the simulated kubelet to restart the plugin",
        lambda: (pid := _plugin_pid(sim, KILL_NODE)) is not None and pid != killed,
        timeout=60,
    )
    fault.unlink()
    pod = _running(api, namespace, "survivor")
    checkpoint = json.loads(
        (tree.kubelet_plugins / constants.DRIVER_NAME / "checkpoint.json").read_text()
    )
    mine = [c for c in checkpoint["claims"].values() if c["namespace"] == namespace]
    assert [c["state"] for c in mine] == ["PrepareCompleted"]
    assert len(list(tree.cdi.glob(f"*{mine[0]['uid']}*"))) == 1
    assert _cdi_devices(sim, pod)["claims"][0]["uid"] == mine[0]["uid"]
    _delete_pod(api, namespace, "survivor")
    waiting.until(
        "the claim's CDI spec to go with its unprepare",
        lambda: not list(tree.cdi.glob(f"*{mine[0]['uid']}*")),
        timeout=60,
    )


ALLOWED = [
    ("resource.k8s.io", "resourceclaims", "", "get"),
    ("resource.k8s.io", "resourceclaims", "", "list"),
    ("resource.k8s.io", "resourceslices", "", "create"),
    ("resource.k8s.io", "resourceslices", "", "update"),
    ("", "nodes", "", "patch"),
    ("", "nodes", "status", "patch"),
    ("", "events", "", "create"),
    (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "", "list"),
]
DENIED = [
    # Per-node components watch nothing cluster-wide that grows with the cluster.
    ("resource.k8s.io", "resourceclaims", "", "watch"),
    (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "", "watch"),
    ("resource.k8s.io", "resourceclaims", "", "create"),
    ("resource.k8s.io", "resourceclaims", "", "delete"),
    ("resource.k8s.io", "resourceclaims", "status", "update"),
    ("resource.k8s.io", "deviceclasses", "", "create"),
    ("", "nodes", "", "delete"),
    ("", "pods", "", "create"),
    ("", "pods", "", "delete"),
    ("", "secrets", "", "get"),
    ("", "secrets", "", "list"),
    ("", "configmaps", "", "create"),
    ("", "serviceaccounts", "token", "create"),
    (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "", "create"),
    (constants.GROUP, constants.COMPUTE_DOMAIN_PLURAL, "status", "update"),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "", "create"),
    ("apps", "daemonsets", "", "update"),
]


def test_plugin_service_account_has_what_it_needs_and_nothing_more(
    chart: str, api: client.ApiClient
) -> None:
    daemonset = (
        client.AppsV1Api(api)
        .list_namespaced_daemon_set(
            chart, label_selector="app.kubernetes.io/component=kubelet-plugin"
        )
        .items[0]
    )
    account = daemonset.spec.template.spec.service_account_name

    def allowed(*rule: str) -> bool:
        return kube.service_account_may(api, chart, account, rule, in_namespace="default")

    assert [a for a in ALLOWED if not allowed(*a)] == []
    assert [d for d in DENIED if allowed(*d)] == []


VERDICT_NODE = "gb200-r0-n15"


def test_slice_follows_the_fabric_verdict(
    chart: str, sim: sim_cluster.SimCluster, api: client.ApiClient
) -> None:
    def devices() -> int:
        return next(
            len(s.spec.devices or []) for s in _slices(api) if s.spec.node_name == VERDICT_NODE
        )

    sim.set_fabric_profile(VERDICT_NODE, topology.FabricProfile.FAILED)
    try:
        waiting.until(
            "node-init's re-check and the plugin to withdraw the devices",
            lambda: devices() == 0,
            timeout=60,
            interval=0.5,
        )
    finally:
        sim.set_fabric_profile(VERDICT_NODE, topology.FabricProfile.HEALTHY)
    waiting.until(
        "the devices to come back with a healthy fabric",
        lambda: devices() == DEVICES,
        timeout=60,
        interval=0.5,
    )


def test_metrics_and_probes_are_served(chart: str, api: client.ApiClient) -> None:
    plugins = (
        client.CoreV1Api(api)
        .list_namespaced_pod(chart, label_selector="app.kubernetes.io/component=kubelet-plugin")
        .items
    )
    pod = next(p for p in plugins if p.spec.node_name == CHANNEL_NODE)
    port = next(
        p.container_port for c in pod.spec.containers for p in c.ports or [] if p.name == "http"
    )
    base = f"http://{pod.status.pod_ip}:{port}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    assert waiting.until(
        "the plugin's /readyz", lambda: get("/readyz")[0] == 200, timeout=30, retry_on=(OSError,)
    )
    status, health = get("/healthz")
    assert status == 200 and constants.DRIVER_NAME in health
    status, metrics = get("/metrics")
    assert status == 200
    for series in (
        'computedomains_kubeletplugin_requests_total{operation="prepare"}',
        "computedomains_kubeletplugin_request_duration_seconds_bucket",
        "computedomains_kubeletplugin_requests_inflight",
        "computedomains_kubeletplugin_prepared_devices",
        'computedomains_kubeletplugin_api_requests_total{code="200",resource="nodes",verb="GET"}',
    ):
        assert series in metrics, series
