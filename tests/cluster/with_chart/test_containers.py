"""Pods pulled from the cluster's registry and run from their image under runc.

The image is pulled by reference (Events, ``imageID``), a wrong tag ends in
``ImagePullBackOff``, a write to a read-only root fails as on a node, a container finds the API
server by in-cluster config alone (the projected ServiceAccount volume at its standard path),
and a workload pod sees from inside exactly the IMEX channels its claim gave it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from cdsim import hosttree
from cdsim.kubelet import main as sim_kubelet
from cdsim.kubelet import node as sim_node
from computedomains import waiting
from computedomains.api import constants
from tests.support import clusters, domains, kube

pytestmark = pytest.mark.cluster

LABELS = {"test": "containers"}
"""Not the chart's: a pod runs here because its image is in the cluster's registry."""
NODE = "gb200-r0-n00"


@pytest.fixture
def image(cluster: clusters.TestCluster) -> str:
    """This build's image in the cluster's registry."""
    return cluster.image()


def _events(api: client.ApiClient, namespace: str, pod: str) -> list[tuple[str, str]]:
    """``(reason, message)`` of every Event about the pod, oldest first."""
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
    found = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector)
    return [(str(e.reason), str(e.message)) for e in found.items]


def _pod(name: str, image: str, args: list[str], **context: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "command": ["python3", "-c"],
                    "args": args,
                    "securityContext": {"runAsUser": 65532, "runAsNonRoot": True, **context},
                }
            ],
        },
    }


def _finished(api: client.ApiClient, namespace: str, name: str) -> Any:
    core = client.CoreV1Api(api)

    def done() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if str(pod.status.phase) in ("Succeeded", "Failed") else None

    return waiting.until(f"pod {namespace}/{name} to finish", done, timeout=120, interval=0.5)


def _log(sim: sim_cluster.SimCluster, namespace: str, pod: Any) -> str:
    assert sim.directory is not None
    folder = sim_kubelet.pod_log_dir(
        sim.directory, namespace=namespace, name=pod.metadata.name, uid=pod.metadata.uid
    )
    return (folder / "main.log").read_text()


def test_a_pod_runs_from_its_pulled_image_and_finds_the_api_server_in_cluster(
    sim: sim_cluster.SimCluster, image: str, api: client.ApiClient, namespace: str
) -> None:
    program = (
        "import os, pathlib, ssl, urllib.request\n"
        "sa = pathlib.Path('/var/run/secrets/kubernetes.io/serviceaccount')\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "request = urllib.request.Request(\n"
        "    f'https://{host}:{port}/api/v1/namespaces/{(sa / \"namespace\").read_text()}/pods',\n"
        "    headers={'Authorization': 'Bearer ' + (sa / 'token').read_text()})\n"
        "context = ssl.create_default_context(cafile=str(sa / 'ca.crt'))\n"
        "try:\n"
        "    urllib.request.urlopen(request, context=context, timeout=30)\n"
        "except urllib.error.HTTPError as exc:\n"
        "    print('api answered', exc.code)\n"  # the default ServiceAccount may not list pods
        "print('uid', os.getuid(), 'root', os.listdir('/')[:0])\n"
    )
    client.CoreV1Api(api).create_namespaced_pod(namespace, _pod("in-cluster", image, [program]))
    pod = _finished(api, namespace, "in-cluster")
    said = _log(sim, namespace, pod)
    assert pod.status.phase == "Succeeded", said
    assert "api answered 403" in said and "uid 65532" in said, said
    (status,) = pod.status.container_statuses
    assert status.image_id.startswith(image.rpartition(":")[0] + "@sha256:"), status.image_id
    reasons = [reason for reason, _ in _events(api, namespace, "in-cluster")]
    assert "Pulled" in reasons, reasons


def test_a_write_to_a_read_only_root_fails_as_on_a_node(
    sim: sim_cluster.SimCluster, image: str, api: client.ApiClient, namespace: str
) -> None:
    program = "open('/written', 'w')"
    pod = _pod("read-only", image, [program], readOnlyRootFilesystem=True)
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    finished = _finished(api, namespace, "read-only")
    assert finished.status.phase == "Failed"
    (status,) = finished.status.container_statuses
    assert status.state.terminated.exit_code == 1
    assert "Read-only file system: '/written'" in _log(sim, namespace, finished)


def test_an_unknown_tag_ends_in_image_pull_back_off_with_events(
    image: str, api: client.ApiClient, namespace: str
) -> None:
    missing = image.rpartition(":")[0] + ":no-such-tag"
    client.CoreV1Api(api).create_namespaced_pod(namespace, _pod("missing", missing, ["pass"]))
    core = client.CoreV1Api(api)

    def backing_off() -> Any:
        pod = core.read_namespaced_pod("missing", namespace)
        statuses = pod.status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return state if state is not None and state.reason == "ImagePullBackOff" else None

    state = waiting.until("the pod to back off pulling", backing_off, timeout=60, interval=0.5)
    assert state.message == f'Back-off pulling image "{missing}"'
    messages = _events(api, namespace, "missing")
    assert ("Pulling", f'Pulling image "{missing}"') in messages, messages
    assert ("Failed", "Error: ErrImagePull") in messages, messages
    assert ("BackOff", f'Back-off pulling image "{missing}"') in messages, messages
    failed = [m for r, m in messages if r == "Failed" and m.startswith("Failed to pull image")]
    assert failed and "manifest unknown" in failed[0], messages


CHANNELS = "/dev/nvidia-caps-imex-channels"


def _domain(api: client.ApiClient, namespace: str, mode: str) -> dict[str, Any]:
    name = f"cd-{mode.lower()}"
    body = {
        "apiVersion": f"{constants.GROUP}/{constants.STORAGE_VERSION}",
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"},
                             "allocationMode": mode}},
    }  # fmt: skip
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        constants.GROUP, constants.STORAGE_VERSION, namespace, constants.COMPUTE_DOMAIN_PLURAL, body
    )
    return domains.get_domain(api, namespace, name)


def _looking_pod(
    api: client.ApiClient, namespace: str, domain: dict[str, Any], node: str, image: str
) -> str:
    """A pod of ``domain`` on ``node`` that lists the channels it was given, then waits."""
    name = f"{domain['metadata']['name']}-looks"
    spec = domains.pod_spec(domain, node=node)
    spec["containers"][0] |= {
        "image": image,
        "command": ["sh", "-c", f"echo channels: $(ls {CHANNELS} | sort); exec sleep 3600"],
    }
    # sleep, PID 1 of its container, ignores SIGTERM: the shared nodes are free at once.
    spec["terminationGracePeriodSeconds"] = 0
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name, "labels": {"domain": domain["metadata"]["name"]}},
            "spec": spec,
        },
    )
    return name


def _seen_channels(
    sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str, name: str
) -> list[str]:
    core = client.CoreV1Api(api)

    def said() -> list[str] | None:
        pod = core.read_namespaced_pod(name, namespace)
        try:
            text = _log(sim, namespace, pod)
        except OSError:
            return None
        line = next((ln for ln in text.splitlines() if ln.startswith("channels:")), None)
        return None if line is None else line.removeprefix("channels:").split()

    return waiting.until(
        f"pod {namespace}/{name} to list its channels", said, timeout=180, interval=1
    )


def test_a_workload_pod_sees_only_the_channels_its_claim_gave_it(
    chart: str,
    cluster: clusters.TestCluster,
    sim: sim_cluster.SimCluster,
    api: client.ApiClient,
    namespace: str,
) -> None:
    workload_image = cluster.workload_image()
    single = _domain(api, namespace, "Single")
    everything = _domain(api, namespace, "All")
    first = _looking_pod(api, namespace, single, "gb200-r0-n00", workload_image)
    second = _looking_pod(api, namespace, everything, "gb200-r0-n01", workload_image)
    seen_single = _seen_channels(sim, api, namespace, first)
    seen_all = _seen_channels(sim, api, namespace, second)
    assert len(seen_single) == 1 and seen_single[0].startswith("channel"), seen_single
    assert len(seen_all) == hosttree.IMEX_CHANNEL_COUNT, len(seen_all)
    # Exactly what the claim's CDI devices named: the pod of the other domain sees only its own.
    pod = client.CoreV1Api(api).read_namespaced_pod(first, namespace)
    assert sim.directory is not None
    folder = sim_node.pod_dir(sim.directory / "nodes" / "gb200-r0-n00", str(pod.metadata.uid))
    prepared = (folder / sim_node.CDI_DEVICES_FILE).read_text()
    assert f"{CHANNELS}/{seen_single[0]}" in prepared
    domains.wait_ready(api, namespace, single, [first])


def test_an_exec_probe_runs_inside_the_container(
    image: str, api: client.ApiClient, namespace: str
) -> None:
    # The file exists only in the container's own root: a check run anywhere else fails.
    program = "import pathlib, time; pathlib.Path('/tmp/ready').touch(); time.sleep(600)"
    pod = _pod("exec-probe", image, [program])
    exists = "import os, sys; sys.exit(not os.path.exists('/tmp/ready'))"
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "exec": {"command": ["python3", "-c", exists]}, "periodSeconds": 1,
    }  # fmt: skip
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    ready = kube.wait_for_pod(api, namespace, "exec-probe", "Ready by its exec probe",
                              kube.pod_ready, timeout=120)  # fmt: skip
    assert ready.status.phase == "Running"
