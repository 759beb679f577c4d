"""The simulated kubelet runs chart pods' probes and removes deleted pods as a kubelet does.

A chart-labelled Deployment runs a small HTTP server per pod, bound to the pod's IP, whose
``/readyz`` and ``/healthz`` answers a test switches through files in the node's host tree.
Readiness decides the pod's ``Ready`` condition and whether the Service proxy (how the API
server reaches webhooks) routes to it; a failed liveness probe restarts the container; a
deleted pod stays Terminating until its process has stopped.
"""

from __future__ import annotations

import http.client
import pathlib
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim.kubelet import serviceproxy
from computedomains import waiting
from tests.support import clusters, kube

pytestmark = [pytest.mark.cluster, pytest.mark.sim]

PORT = 8080
# Serves /whoami (the pod's name), and /readyz, /healthz as the files "unready" and "sick" in
# its folder say; records each start (its PID as it sees it). Exits 0 on SIGTERM after
# $STOP_SECONDS seconds.
_SERVER = """
import http.server, os, signal, sys, time
folder = os.path.join(sys.argv[1], os.environ["POD_NAME"])
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, "starts"), "a").write(f"{os.getpid()}\\n")
def stop(*_):
    time.sleep(float(os.environ.get("STOP_SECONDS", "0")))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        flag = {"/readyz": "unready", "/healthz": "sick"}.get(self.path)
        bad = flag is not None and os.path.exists(os.path.join(folder, flag))
        body = ("down" if bad else os.environ["POD_NAME"]).encode()
        self.send_response(503 if bad else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer((os.environ["POD_IP"], int(sys.argv[2])), H).serve_forever()
"""


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _deployment(
    name: str, labels: dict[str, str], node: str, *, image: str, stop_seconds: int
) -> dict[str, Any]:
    http_get = {"path": "/readyz", "port": "http"}
    health = {**http_get, "path": "/healthz"}
    container = {
        "name": "server",
        "image": image,
        "command": ["python3", "-c", _SERVER, "/state", str(PORT)],
        "env": [_field("POD_NAME", "metadata.name"), _field("POD_IP", "status.podIP"),
                {"name": "STOP_SECONDS", "value": str(stop_seconds)}],
        "ports": [{"name": "http", "containerPort": PORT}],
        "readinessProbe": {"httpGet": http_get, "periodSeconds": 1, "failureThreshold": 1},
        # A loaded machine may take seconds to start Python: without the startup probe the
        # liveness probe (as a kubelet's, from the first second) would restart it on the way.
        "startupProbe": {"httpGet": health, "periodSeconds": 1, "failureThreshold": 60},
        "livenessProbe": {"httpGet": health, "periodSeconds": 1, "failureThreshold": 2},
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
        "securityContext": {"runAsUser": 0},  # the hostPath folder is root's
    }  # fmt: skip
    spec = {
        "nodeName": node,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [
            {"name": "state", "hostPath": {"path": f"/var/lib/{name}", "type": "DirectoryOrCreate"}}
        ],
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


@pytest.fixture
def deployments(api: client.ApiClient, namespace: str) -> Iterator[list[str]]:
    """Names of the chart-labelled Deployments a test makes; deleted, pods and all, after it.

    Left behind they would pass for another release of the chart (preflight refuses those).
    """
    made: list[str] = []
    yield made
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    for name in made:
        apps.delete_namespaced_deployment(name, namespace, propagation_policy="Foreground")

    def gone() -> bool:
        names = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
        return not names & set(made) and not core.list_namespaced_pod(namespace).items

    waiting.until("the test's Deployments and their pods to be gone", gone, timeout=120)


def _through_proxy(sim: sim_cluster.SimCluster, ip: str, port: int) -> str:
    """GET /whoami through the Service proxy, as the API server reaches a webhook."""
    assert sim.directory is not None
    with socket.socket(socket.AF_UNIX) as tunnel:
        tunnel.settimeout(10)
        tunnel.connect(str(sim.directory / serviceproxy.SOCKET_NAME))
        tunnel.sendall(f"CONNECT {ip}:{port} HTTP/1.1\r\nHost: {ip}:{port}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += tunnel.recv(4096)
        if not answer.startswith(b"HTTP/1.1 200"):
            return answer.split(b"\r\n", 1)[0].decode()
        tunnel.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        response = http.client.HTTPResponse(tunnel)
        response.begin()
        return response.read().decode()


def _pods(api: client.ApiClient, namespace: str, labels: dict[str, str]) -> list[Any]:
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    found = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(found, key=lambda p: p.metadata.name)


def _container(pod: Any) -> Any:
    return (pod.status.container_statuses or [None])[0]


def test_readiness_decides_ready_and_service_traffic_liveness_restarts_the_container(
    cluster: clusters.TestCluster, sim: sim_cluster.SimCluster, api: client.ApiClient,
    namespace: str, deployments: list[str],
) -> None:  # fmt: skip
    node = sim.nodes[0].name
    name = f"probed-{uuid.uuid4().hex[:6]}"
    deployments.append(name)
    labels = {"app.kubernetes.io/name": "compute-domains", "test": name}
    state = sim.host_trees[node].root / "var/lib" / name
    # Both pods start unready: nothing may route to them yet.
    state.mkdir(parents=True)
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace, _deployment(name, labels, node, image=cluster.image(), stop_seconds=0)
    )
    core = client.CoreV1Api(api)
    service = core.create_namespaced_service(namespace, {
        "metadata": {"name": name},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": "http"}]},
    })  # fmt: skip
    ip = str(service.spec.cluster_ip)

    def both_running() -> list[Any] | None:
        found = _pods(api, namespace, labels)
        running = [p for p in found if _container(p) and _container(p).state.running]
        return found if len(running) == 2 else None

    first, second = waiting.until("both pods' processes to run", both_running, timeout=120)
    for pod in (first, second):
        (state / pod.metadata.name).mkdir(exist_ok=True)
        (state / pod.metadata.name / "unready").touch()

    def ready(pod: Any) -> Callable[[], Any]:
        return lambda: kube.pod_ready(core.read_namespaced_pod(pod.metadata.name, namespace))

    # Not ready, by the probe: the condition says why, and the proxy routes nowhere.
    pod = kube.wait_for_pod(api, namespace, first.metadata.name, "unready by its probe",
                            lambda p: _container(p).started and not _container(p).ready,
                            timeout=60)  # fmt: skip
    assert not kube.pod_ready(pod) and pod.status.phase == "Running"
    assert kube.pod_condition(pod, "Ready").reason == "ContainersNotReady"

    def routes_nowhere() -> bool:
        answer = _through_proxy(sim, ip, 80)
        return answer.startswith("HTTP/1.1 503 ") and "no ready pod" in answer

    # The proxy routes by its own watch of the pods, which sees a readiness change a moment late.
    waiting.until("the proxy to route nowhere while both are unready", routes_nowhere, timeout=30)
    # One ready: every connection goes to it.
    (state / second.metadata.name / "unready").unlink()
    waiting.until(f"{second.metadata.name} to become Ready", ready(second), timeout=60)
    waiting.until(
        f"the proxy to route to {second.metadata.name}",
        lambda: _through_proxy(sim, ip, 80) == second.metadata.name,
        timeout=30,
    )
    assert {_through_proxy(sim, ip, 80) for _ in range(5)} == {second.metadata.name}
    assert not ready(first)(), "the other still fails its readiness probe"
    # It fails again: the proxy stops routing to it.
    (state / second.metadata.name / "unready").touch()
    waiting.until(f"{second.metadata.name} to be unready", lambda: not ready(second)(), timeout=60)
    waiting.until("the proxy to route nowhere again", routes_nowhere, timeout=30)

    # Liveness: the container is killed (SIGTERM) and started again; the pod stays.
    starts = state / first.metadata.name / "starts"
    before = starts.read_text().split()
    restarts = _container(core.read_namespaced_pod(first.metadata.name, namespace)).restart_count
    (state / first.metadata.name / "sick").touch()

    def restarted() -> Any:
        pod = core.read_namespaced_pod(first.metadata.name, namespace)
        status = _container(pod)
        return pod if status.restart_count == restarts + 1 and status.state.running else None

    pod = waiting.until("the container to be restarted by its liveness probe", restarted,
                        timeout=90)  # fmt: skip
    (state / first.metadata.name / "sick").unlink()
    assert pod.metadata.uid == first.metadata.uid
    assert _container(pod).last_state.terminated.exit_code == 0, "it stopped on SIGTERM"
    waiting.until(
        "the new process to start serving",
        lambda: len(starts.read_text().split()) == len(before) + 1,
        timeout=30,
    )
    killing = kube.events_for(api, namespace, "Pod", first.metadata.name, reason="Killing")
    assert any("failed liveness probe, will be restarted" in e.message for e in killing)
    unhealthy = kube.events_for(api, namespace, "Pod", first.metadata.name, reason="Unhealthy")
    assert any(e.message.startswith("Readiness probe failed: HTTP probe failed") for e in unhealthy)


def test_a_deleted_chart_pod_stays_terminating_until_its_process_has_stopped(
    cluster: clusters.TestCluster, sim: sim_cluster.SimCluster, api: client.ApiClient,
    namespace: str, deployments: list[str],
) -> None:  # fmt: skip
    node = sim.nodes[1].name
    name = f"slowstop-{uuid.uuid4().hex[:6]}"
    deployments.append(name)
    labels = {"app.kubernetes.io/name": "compute-domains", "test": name}
    deployment = _deployment(name, labels, node, image=cluster.image(), stop_seconds=3)
    deployment["spec"]["replicas"] = 1
    client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)
    core = client.CoreV1Api(api)
    (pod,) = waiting.until(
        "the pod to be Ready",
        lambda: [p for p in _pods(api, namespace, labels) if kube.pod_ready(p)],
        timeout=120,
    )
    # Its process as the host sees it (in a container, its own PID differs).
    pid = kube.find_process("-c", _SERVER, under=sim.host_trees[node].root)
    assert pid is not None
    core.delete_namespaced_pod(pod.metadata.name, namespace)
    terminating = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert terminating.metadata.deletion_timestamp is not None
    assert pathlib.Path(f"/proc/{pid}").exists(), "SIGTERM handling takes 3 s"

    def gone() -> bool:
        try:
            core.read_namespaced_pod(pod.metadata.name, namespace)
        except ApiException as exc:
            return kube.status_of(exc) == 404
        return False

    waiting.until("the pod to be removed once its process stopped", gone, timeout=60)
    assert not pathlib.Path(f"/proc/{pid}").exists()
