"""The controllers do their jobs: a DaemonSet covers every simulated node, a Job completes."""

from __future__ import annotations

import pytest
from kubernetes import client

from cdsim import cluster as sim_cluster
from computedomains import waiting
from tests.support import kube

pytestmark = pytest.mark.cluster

# Real images, so the same tests run on a real cluster; the simulated nodes never pull them.
_SLEEPER = {"name": "main", "image": "busybox:1.37", "command": ["sleep", "3600"]}
_ONE_SHOT = {"name": "main", "image": "busybox:1.37", "command": ["true"]}


def test_daemonset_runs_a_pod_on_every_simulated_node(
    sim: sim_cluster.SimCluster, api: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api)
    labels = {"app": "everywhere"}
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": "everywhere"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [_SLEEPER]}},
            },
        },
    )
    want = {node.name for node in sim.nodes}

    def all_running() -> dict[str, str] | None:
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app=everywhere")
        running = {
            str(p.spec.node_name): str(p.status.pod_ip)
            for p in pods.items
            if p.status.phase == "Running"
        }
        return running if set(running) == want and len(pods.items) == len(want) else None

    running = waiting.until(
        f"a Running DaemonSet pod on each of {len(want)} nodes", all_running, timeout=120
    )
    status = apps.read_namespaced_daemon_set_status("everywhere", namespace).status
    assert status.desired_number_scheduled == len(want)
    # Pod IPs come from each node's loopback podCIDR: distinct, and never routable off the machine.
    assert len(set(running.values())) == len(want)
    assert all(ip.startswith("127.") for ip in running.values())


def test_job_runs_to_completion(api: client.ApiClient, namespace: str) -> None:
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "once"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [_ONE_SHOT]}},
            },
        },
    )

    def complete() -> bool:
        job = batch.read_namespaced_job_status("once", namespace)
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

    waiting.until(f"Job {namespace}/once to be Complete", complete, timeout=90)
    job = batch.read_namespaced_job_status("once", namespace)
    assert job.status.succeeded == 1
    pods = (
        client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="job-name=once").items
    )
    assert [p.status.phase for p in pods] == ["Succeeded"]
    assert kube.pod_condition(pods[0], "Ready").status == "False"
