"""Small Kubernetes helpers for tests: waits that poll with deadlines and name what they await."""

from __future__ import annotations

import pathlib
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import processes
from cdsim.kubelet import main as sim_kubelet
from computedomains import waiting
from computedomains.api import constants
from tests.support import clusters


def wait_for_default_service_account(api: client.ApiClient, namespace: str) -> None:
    """The ServiceAccount controller creates ``default``; pods cannot be admitted before it."""
    core = client.CoreV1Api(api)
    waiting.until(
        f"ServiceAccount {namespace}/default",
        lambda: core.read_namespaced_service_account("default", namespace),
        timeout=30,
        retry_on=(ApiException,),
    )


def status_of(exc: ApiException) -> int:
    """The HTTP status of an API error."""
    return int(exc.status or 0)


def crd_established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    """Whether the CRD ``name`` has condition Established=True (its API is served)."""
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def crd_gone(ext: client.ApiextensionsV1Api, name: str) -> bool:
    """Whether the CRD ``name`` does not exist (any other API answer is raised)."""
    try:
        ext.read_custom_resource_definition(name)
    except ApiException as exc:
        if status_of(exc) == 404:
            return True
        raise
    return False


def pod_condition(pod: Any, kind: str) -> Any | None:
    """The pod's condition of type ``kind``, if present."""
    for condition in pod.status.conditions or []:
        if condition.type == kind:
            return condition
    return None


def pod_ready(pod: Any) -> bool:
    """Whether the pod's ``Ready`` condition is True."""
    condition = pod_condition(pod, "Ready")
    return condition is not None and condition.status == "True"


def events_for(
    api: client.ApiClient, namespace: str, kind: str, name: str, *, reason: str
) -> list[Any]:
    """The Events ``reason`` about object ``kind/name`` in ``namespace``."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
    return list(
        client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items
    )


def wait_for_pod(
    api: client.ApiClient,
    namespace: str,
    name: str,
    what: str,
    predicate: Any,
    *,
    timeout: float = 60,
) -> Any:
    """Poll pod ``namespace/name`` until ``predicate(pod)`` holds; returns the pod."""
    core = client.CoreV1Api(api)

    def check() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if predicate(pod) else None

    return waiting.until(
        f"pod {namespace}/{name} {what}", check, timeout=timeout, retry_on=(ApiException,)
    )


def service_account_may(
    api: client.ApiClient,
    namespace: str,
    service_account: str,
    rule: tuple[str, ...],
    *,
    in_namespace: str,
) -> bool:
    """Whether ``namespace/service_account`` may do ``(group, resource, subresource, verb)``."""
    group, resource, subresource, verb = rule
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{namespace}:{service_account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "resourceAttributes": {
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                    "verb": verb,
                    "namespace": in_namespace,
                },
            }
        }
    )
    return bool(review.status.allowed)


def find_process(*needles: str, under: pathlib.Path | None = None) -> int | None:
    """PID of a local process whose command line has every one of ``needles`` as an argument,
    working under ``under`` when given (:func:`cdsim.processes.find`)."""
    return processes.find(*needles, under=under)


def node_event(api: client.ApiClient, node: str, reason: str, *, timeout: float = 30) -> Any:
    """The latest Event ``reason`` on Node ``node`` (Node Events live in ``default``)."""

    def seen() -> Any:
        items = (
            client.CoreV1Api(api)
            .list_namespaced_event(
                "default", field_selector=f"involvedObject.name={node},reason={reason}"
            )
            .items
        )
        return items[-1] if items else None

    return waiting.until(f"a {reason} Event on node {node}", seen, timeout=timeout)


def component_pod(api: client.ApiClient, namespace: str, component: str, node: str) -> Any:
    """The chart's pod of ``component`` (``app.kubernetes.io/component``) on ``node``."""
    (pod,) = (
        client.CoreV1Api(api)
        .list_namespaced_pod(
            namespace,
            label_selector=f"{constants.COMPONENT_LABEL}={component}",
            field_selector=f"spec.nodeName={node}",
        )
        .items
    )
    return pod


def container_flags(pod: Any, container: str) -> dict[str, str]:
    """The flags (``--name`` to value) of ``container`` in ``pod``."""
    found = next(c for c in [*pod.spec.containers, *(pod.spec.init_containers or [])]
                 if c.name == container)  # fmt: skip
    return dict(str(a).partition("=")[::2] for a in found.args)


def _sim_logs(
    cluster: clusters.TestCluster, namespace: str, pods: str, container: str
) -> str | None:
    """The simulated kubelet's log of ``container`` in every pod matching the glob ``pods``,
    oldest pod first; None when the cluster is not simulated."""
    if cluster.sim is None or cluster.sim.directory is None:
        return None
    folders = sim_kubelet.pod_log_dirs(cluster.sim.directory, namespace=namespace, name=pods)
    logs = [folder / f"{container}.log" for folder in folders]
    return "".join(log.read_text(errors="replace") for log in logs if log.exists())


def pod_log(cluster: clusters.TestCluster, namespace: str, name: str, container: str) -> str:
    """What ``container`` of pod ``namespace/name`` wrote (stdout and stderr).

    Simulated: the process's output, which the simulated kubelet keeps after the pod is gone
    (of every pod that had this name, oldest first); empty for a pod that is not a chart pod
    (kwok runs no process for it). Elsewhere: the API's pod log (the pod must still exist).
    """
    text = _sim_logs(cluster, namespace, name, container)
    if text is not None:
        return text
    core = client.CoreV1Api(cluster.api())
    return str(core.read_namespaced_pod_log(name, namespace, container=container))


def job_log(cluster: clusters.TestCluster, namespace: str, job: str, container: str) -> str:
    """What ``container`` wrote in the pods of Job ``namespace/job``, oldest pod first.

    Simulated, this includes pods already deleted with their Job (a Helm hook's, with
    ``hook-succeeded``), found by the Job controller's pod names ``<job>-<5 characters>``.
    """
    text = _sim_logs(cluster, namespace, f"{job}-?????", container)
    if text is not None:
        return text
    pods = client.CoreV1Api(cluster.api()).list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job}"
    )
    ordered = sorted(pods.items, key=lambda p: str(p.metadata.creation_timestamp))
    return "".join(pod_log(cluster, namespace, p.metadata.name, container) for p in ordered)


def driver_slices(api: client.ApiClient) -> list[Any]:
    """The ResourceSlices of our driver."""
    return [
        s
        for s in client.ResourceV1Api(api).list_resource_slice().items
        if s.spec.driver == constants.DRIVER_NAME
    ]
