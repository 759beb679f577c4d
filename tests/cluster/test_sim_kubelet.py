"""The simulated kubelet: chart pods run from their image; DRA plugins are called like a kubelet.

The DRA tests use a made-up driver (tests/support/fakedra.py) serving the real gRPC APIs on
one node's sockets, with a hand-written DeviceClass and ResourceSlice for it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import processes
from cdsim.kubelet import dra, node
from computedomains import waiting
from tests.support import clusters, fakedra, kube

pytestmark = pytest.mark.cluster

CHART_LABELS = {"app.kubernetes.io/name": "compute-domains", "test": "sim-kubelet"}

# Proves the pod-bound token works: asks the API server who it is (by in-cluster config: the
# service variables and the token at its standard path, or where a process-mode kubelet puts
# it), writes the answer to the file named by its first argument, then idles like a daemon.
_WHOAMI = """
import json, os, signal, ssl, sys, urllib.request
sa = os.environ.get("COMPUTE_DOMAINS_SERVICEACCOUNT_DIR",
                    "/var/run/secrets/kubernetes.io/serviceaccount")
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
request = urllib.request.Request(
    f"https://{host}:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews",
    data=json.dumps(review).encode(),
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read(),
             "Content-Type": "application/json"},
    method="POST",
)
context = ssl.create_default_context(cafile=f"{sa}/ca.crt")
review = json.load(urllib.request.urlopen(request, context=context, timeout=30))
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    json.dump({"user": review["status"]["userInfo"],
               "namespace": open(f"{sa}/namespace").read(), "pod": os.environ["POD_NAME"]}, f)
os.replace(out + ".tmp", out)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 in a container has no default
signal.pause()
"""


def _field(name: str, path: str) -> dict[str, object]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _daemonset(namespace: str, nodes: list[str], image: str) -> dict[str, object]:
    on_nodes = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
    container = {
        "name": "whoami",
        "image": image,
        "command": ["python3", "-c", _WHOAMI],
        "args": ["$(OUT_FILE)"],
        "env": [
            _field("NODE_NAME", "spec.nodeName"),
            _field("POD_NAME", "metadata.name"),
            {"name": "OUT_FILE", "value": "/out/$(NODE_NAME).json"},
        ],
        "volumeMounts": [{"name": "out", "mountPath": "/out"}],
        # The hostPath folder is root's, as a kubelet makes it.
        "securityContext": {"runAsUser": 0},
    }
    out = {"path": f"/var/lib/sim-test/{namespace}", "type": "DirectoryOrCreate"}
    affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [on_nodes]}]}}  # fmt: skip
    return {
        "metadata": {"name": "whoami", "labels": CHART_LABELS},
        "spec": {
            "selector": {"matchLabels": CHART_LABELS},
            "template": {
                "metadata": {"labels": CHART_LABELS},
                "spec": {
                    "affinity": {"nodeAffinity": affinity},
                    "volumes": [{"name": "out", "hostPath": out}],
                    "containers": [container],
                },
            },
        },
    }


def test_chart_daemonset_runs_one_process_per_node_with_a_pod_bound_token(
    cluster: clusters.TestCluster, sim: sim_cluster.SimCluster, api: client.ApiClient,
    namespace: str,
) -> None:  # fmt: skip
    nodes = [n.name for n in sim.nodes[:3]]
    daemonset = _daemonset(namespace, nodes, cluster.image())
    client.AppsV1Api(api).create_namespaced_daemon_set(namespace, daemonset)
    outputs = {
        n: sim.host_trees[n].root / "var/lib/sim-test" / namespace / f"{n}.json" for n in nodes
    }

    def written() -> dict[str, dict[str, object]] | None:
        if not all(p.exists() for p in outputs.values()):
            return None
        return {n: json.loads(p.read_text()) for n, p in outputs.items()}

    reports = waiting.until(
        f"the chart DaemonSet's processes on {nodes} to report through the API server",
        written,
        timeout=120,
    )
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    by_node = {str(p.spec.node_name): p for p in pods}
    assert sorted(by_node) == sorted(nodes)
    for name, report in reports.items():
        pod = by_node[name]
        assert report["pod"] == pod.metadata.name
        assert report["namespace"] == namespace
        user = report["user"]
        assert user["username"] == f"system:serviceaccount:{namespace}:default"
        # A pod-bound token: the API server knows the pod and its node.
        assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod.metadata.name]
        assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [pod.metadata.uid]
        assert user["extra"]["authentication.kubernetes.io/node-name"] == [name]
        # Written by the kubelet into the pod's folder on the node (the projected volume
        # under runc, the process mode's own folder), renewed there.
        folder = node.pod_dir(sim.host_trees[name].root, pod.metadata.uid)
        tokens = [*folder.glob("volumes/*/token"), *folder.glob("serviceaccount/token")]
        assert len(tokens) == 1 and tokens[0].read_text(), tokens

    # One process per node, in that node's tree (its pod folder, or a container rooted there).
    found = {n: kube.find_process(f"/out/{n}.json", under=sim.host_trees[n].root) for n in nodes}
    pids = [pid for pid in found.values() if pid is not None]
    assert len(set(pids)) == len(nodes), found
    client.AppsV1Api(api).delete_namespaced_daemon_set("whoami", namespace)
    waiting.until(
        f"the processes {pids} of the deleted DaemonSet's pods to be stopped",
        lambda: not any(processes.pid_alive(p) for p in pids),
        timeout=60,
    )


# -- DRA ------------------------------------------------------------------------------------


@pytest.fixture
def widget(
    sim: sim_cluster.SimCluster, api: client.ApiClient
) -> Iterator[tuple[fakedra.FakeDraPlugin, str]]:
    """A made-up driver with one device on one node and its plugin; yields (plugin, node)."""
    driver = f"w{uuid.uuid4().hex[:6]}.sim.example.com"
    node_name = sim.nodes[7].name
    resource = client.ResourceV1Api(api)
    resource.create_device_class(
        {
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
        }
    )
    try:
        resource.create_resource_slice(
            {
                "metadata": {"name": f"{node_name}-{driver}"},
                "spec": {
                    "driver": driver,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "dev-0"}],
                },
            }
        )
        try:
            with fakedra.FakeDraPlugin(driver, sim.host_trees[node_name]) as plugin:
                waiting.until(
                    f"the simulated kubelet to register {driver} on {node_name}",
                    lambda: plugin.record.registrations == [(True, "")],
                    timeout=30,
                )
                yield plugin, node_name
        finally:
            resource.delete_resource_slice(f"{node_name}-{driver}")
    finally:
        resource.delete_device_class(driver)


def _claim_pod(name: str, claim: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "widget", **claim}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.37",
                    "command": ["sleep", "3600"],
                    "resources": {"claims": [{"name": "widget"}]},
                }
            ],
        },
    }


def _template(api: client.ApiClient, namespace: str, driver: str) -> dict[str, str]:
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace,
        {
            "metadata": {"name": "widget"},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "w", "exactly": {"deviceClassName": driver}}]}
                }
            },
        },
    )
    return {"resourceClaimTemplateName": "widget"}


def _claim_uid(api: client.ApiClient, pod: client.V1Pod) -> str:
    name = pod.status.resource_claim_statuses[0].resource_claim_name
    claim = client.ResourceV1Api(api).read_namespaced_resource_claim(name, pod.metadata.namespace)
    return str(claim.metadata.uid)


def _running(pod: client.V1Pod) -> bool:
    return pod.status.phase == "Running"


def test_claim_is_prepared_once_resolved_and_unprepared_when_the_pod_goes(
    widget: tuple[fakedra.FakeDraPlugin, str],
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
) -> None:
    plugin, node_name = widget
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace, _claim_pod("user", _template(api, namespace, plugin.driver))
    )

    pod = kube.wait_for_pod(api, namespace, "user", "to be prepared and Running", _running)
    uid = _claim_uid(api, pod)
    assert pod.spec.node_name == node_name
    assert pod.metadata.annotations[dra.PREPARED_ANNOTATION] == "true"
    assert plugin.record.prepare_calls == [[uid]]
    devices = json.loads(
        (
            node.pod_dir(sim.host_trees[node_name].root, pod.metadata.uid) / node.CDI_DEVICES_FILE
        ).read_text()
    )
    assert devices["cdiDevices"] == [plugin.cdi_id(uid)]
    edits = devices["containers"]["main"]["containerEdits"]
    assert edits["env"] == [f"WIDGET_DRIVER={plugin.driver}", f"WIDGET_CLAIM={uid}"]
    assert edits["mounts"] == [{"hostPath": "/var/run/widget", "containerPath": "/widget"}]
    assert [c["uid"] for c in devices["claims"]] == [uid]

    core.delete_namespaced_pod("user", namespace)
    waiting.until(
        f"claim {uid} to be unprepared after its pod was deleted",
        lambda: plugin.record.unprepared == [uid],
        timeout=60,
    )
    assert not plugin.cdi_spec(uid).exists()
    assert plugin.record.prepare_calls == [[uid]], "prepared exactly once"


def _prepare_events(api: client.ApiClient, namespace: str, pod: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        if e.involved_object.name == pod and e.reason == dra.FAILED_REASON
    ]


def test_a_failing_prepare_is_reported_retried_and_keeps_the_pod_from_running(
    widget: tuple[fakedra.FakeDraPlugin, str], api: client.ApiClient, namespace: str
) -> None:
    plugin, _ = widget
    plugin.fail_prepare = "widget jammed"
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace, _claim_pod("jammed", _template(api, namespace, plugin.driver))
    )

    events = waiting.until(
        "a FailedPrepareDynamicResources Event quoting the plugin's error",
        lambda: [
            e
            for e in _prepare_events(api, namespace, "jammed")
            if "widget jammed" in str(e.message)
        ],
        timeout=60,
    )
    assert events[0].type == "Warning"
    waiting.until(
        "the failed prepare to be retried",
        lambda: len(plugin.record.prepare_calls) >= 2,
        timeout=60,
    )
    pod = core.read_namespaced_pod("jammed", namespace)
    assert pod.status.phase == "Pending"
    assert dra.PREPARED_ANNOTATION not in (pod.metadata.annotations or {})

    plugin.fail_prepare = None
    kube.wait_for_pod(api, namespace, "jammed", "to run once the plugin recovers", _running)


def test_unprepare_uses_what_was_recorded_when_the_claim_is_already_gone(
    widget: tuple[fakedra.FakeDraPlugin, str], api: client.ApiClient, namespace: str
) -> None:
    plugin, _ = widget
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    created = resource.create_namespaced_resource_claim(
        namespace,
        {
            "metadata": {"name": "standalone"},
            "spec": {
                "devices": {
                    "requests": [{"name": "w", "exactly": {"deviceClassName": plugin.driver}}]
                }
            },
        },
    )
    uid = created.metadata.uid
    core.create_namespaced_pod(namespace, _claim_pod("holder", {"resourceClaimName": "standalone"}))
    kube.wait_for_pod(api, namespace, "holder", "to be prepared and Running", _running)

    plugin.fail_unprepare = "device busy"  # keeps the claim prepared until its object is gone
    core.delete_namespaced_pod("holder", namespace)
    waiting.until("a first (failing) unprepare", lambda: plugin.record.unprepare_calls, timeout=60)
    resource.delete_namespaced_resource_claim("standalone", namespace)

    def claim_gone() -> bool:
        try:
            resource.read_namespaced_resource_claim("standalone", namespace)
        except ApiException as exc:
            return bool(exc.status == 404)
        return False

    waiting.until("the ResourceClaim object to be deleted", claim_gone, timeout=60)
    plugin.fail_unprepare = None
    waiting.until(
        f"the retried unprepare of the deleted claim {uid}",
        lambda: plugin.record.unprepared == [uid],
        timeout=60,
    )
    assert all(call == [uid] for call in plugin.record.unprepare_calls)


# -- Jobs -----------------------------------------------------------------------------------


def _job(name: str, container: dict[str, object]) -> dict[str, object]:
    """A chart Job (run by the simulated kubelet) with one try: its pod's exit code decides it."""
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": CHART_LABELS},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def _job_condition(api: client.ApiClient, namespace: str, name: str) -> str | None:
    """``Complete`` or ``Failed`` once the Job controller has decided, else None."""
    job = client.BatchV1Api(api).read_namespaced_job_status(name, namespace)
    for condition in job.status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return str(condition.type)
    return None


def _finished_pod(api: client.ApiClient, namespace: str, job: str) -> client.V1Pod:
    (pod,) = (
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}")
        .items
    )
    return pod


GIVE_UP = "import sys; print('giving up', file=sys.stderr); sys.exit(3)"


def test_a_chart_job_runs_its_process_and_succeeds_or_fails_by_its_exit_code(
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
) -> None:
    batch = client.BatchV1Api(api)
    image = cluster.image()
    batch.create_namespaced_job(
        namespace, _job("version", {"name": "main", "image": image, "args": ["--version"]})
    )
    failing = {
        "name": "main",
        "image": image,
        "command": ["python3", "-c", GIVE_UP],
    }
    batch.create_namespaced_job(namespace, _job("exits-3", failing))

    for name, outcome in (("version", "Complete"), ("exits-3", "Failed")):
        seen = waiting.until(
            f"Job {namespace}/{name} to be decided by its process's exit code",
            lambda name=name: _job_condition(api, namespace, name),  # type: ignore[misc]
            timeout=120,
        )
        assert seen == outcome, name

    succeeded = _finished_pod(api, namespace, "version")
    assert succeeded.status.phase == "Succeeded"
    (status,) = succeeded.status.container_statuses or []
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (0, "Completed")
    assert kube.pod_log(cluster, namespace, succeeded.metadata.name, "main").startswith(
        "computedomains "
    )

    failed = _finished_pod(api, namespace, "exits-3")
    assert failed.status.phase == "Failed"
    (status,) = failed.status.container_statuses or []
    assert (status.state.terminated.exit_code, status.state.terminated.reason) == (3, "Error"), (
        kube.pod_log(cluster, namespace, failed.metadata.name, "main")
    )
    assert kube.job_log(cluster, namespace, "exits-3", "main") == "giving up\n"
    assert batch.read_namespaced_job_status("exits-3", namespace).status.failed == 1
