"""The node side of many nodes, played without their processes, for the controller at scale.

What the real controller reads from nodes is written here exactly as the per-node components
write it: node-init's clique label, the kubelet's agent pod status (Running, an IP, the agent
container's start), the scheduler's claim allocation, and the IMEX agent's condition and
annotations (``computedomains.api.imex``), written when the agent would:
once the node's slot appears in its clique object (a watch, not a poll). Nodes are plain Node
objects nobody else manages (no kubelet, no kwok): the controller reads their labels and
writes their domain label.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from computedomains.api import constants, imex
from tests.support import kube, plugin

WORKERS = 8
"""Concurrent writers: as many nodes' components writing at once as the two cores serve."""


@dataclasses.dataclass(frozen=True)
class Node:
    """One played node."""

    name: str
    clique: str
    """Its ``nvidia.com/gpu.clique`` value."""
    ip: str
    """Its agent pod's IP (loopback: nothing connects to it)."""


def nodes(count: int, *, per_clique: int) -> list[Node]:
    """``count`` nodes, ``per_clique`` to a clique (the last one may be smaller)."""
    fabric = str(uuid.uuid4())
    return [
        Node(
            name=f"scale-c{i // per_clique:02d}-n{i % per_clique:02d}",
            clique=f"{fabric}.{i // per_clique}",
            ip=f"127.200.{i // 250}.{i % 250 + 1}",
        )
        for i in range(count)
    ]


class NodeSide:
    """Nodes, their agent pods, claims and reports; and the agents' reaction to cliques."""

    def __init__(
        self, api: client.ApiClient, *, driver_ns: str, workload_ns: str, nodes: list[Node]
    ) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)
        self._driver_ns = driver_ns
        self._workload_ns = workload_ns
        self.nodes = {n.name: n for n in nodes}
        self._agent_pods: dict[str, tuple[str, str]] = {}
        """Node → (agent pod name, uid)."""
        self._claims: dict[tuple[str, str], str] = {}
        """(domain, node) → claim name."""
        self._lock = threading.Lock()
        self._joined: dict[str, str] = {}
        """Node → the domain whose workload it runs now (its claim)."""
        self._reported: dict[str, str] = {}
        """Node → the domain its agent last reported READY for."""
        self._node_locks = {n.name: threading.Lock() for n in nodes}
        """Per node: its agent's reports and its workload's leaving happen one at a time."""
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._errors: list[BaseException] = []
        self.reports = 0

    # -- set-up: nodes and agent pods ----------------------------------------------------

    def create(self) -> None:
        """Node objects with their clique label, and a Running agent pod on each."""
        self._each(self._create_node, self.nodes.values())
        self._each(self._create_agent, self.nodes.values())

    def _create_node(self, node: Node) -> None:
        self._core.create_node({
            "metadata": {"name": node.name, "labels": {
                "kubernetes.io/hostname": node.name, constants.CLIQUE_LABEL: node.clique}},
        })  # fmt: skip

    def _create_agent(self, node: Node) -> None:
        name = f"imex-agent-{node.name}"
        pod = self._core.create_namespaced_pod(self._driver_ns, {
            "metadata": {"name": name,
                         "labels": {constants.COMPONENT_LABEL: constants.IMEX_AGENT_COMPONENT}},
            "spec": {"nodeName": node.name, "automountServiceAccountToken": False,
                     "containers": [{"name": imex.AGENT_CONTAINER, "image": "agent"}],
                     "tolerations": [{"operator": "Exists"}]},
        })  # fmt: skip
        started = _now() - datetime.timedelta(seconds=1)
        stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
        self._core.patch_namespaced_pod_status(name, self._driver_ns, {"status": {
            "phase": "Running", "podIP": node.ip, "podIPs": [{"ip": node.ip}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            "containerStatuses": [{
                "name": imex.AGENT_CONTAINER, "image": "agent", "imageID": "", "ready": True,
                "restartCount": 0, "state": {"running": {"startedAt": stamp}}}],
        }})  # fmt: skip
        with self._lock:
            self._agent_pods[node.name] = (name, str(pod.metadata.uid))

    # -- a workload landing and leaving --------------------------------------------------

    def join(self, domain: str, names: Iterable[str]) -> None:
        """A claim of ``domain`` allocated on each node (the controller makes it a member)."""
        self._each(lambda name: self._join(domain, name), names)

    def _join(self, domain: str, name: str) -> None:
        claim = plugin.allocated_claim(
            self._api, self._workload_ns, node=name, device="channel-0",
            parameters=plugin.channel_parameters(domain),
        )  # fmt: skip
        with self._lock:
            self._claims[(domain, name)] = claim["name"]
            self._joined[name] = domain

    def leave(self, domain: str, names: Iterable[str]) -> None:
        """The workload is gone: its claims deleted (the controller takes the node out)."""
        self._each(lambda name: self._leave(domain, name), names)

    def _leave(self, domain: str, name: str) -> None:
        with self._node_locks[name]:
            with self._lock:
                claim = self._claims.pop((domain, name), None)
                self._joined.pop(name, None)
                self._reported.pop(name, None)
            if claim is not None:
                try:
                    client.ResourceV1Api(self._api).delete_namespaced_resource_claim(
                        claim, self._workload_ns
                    )
                except ApiException as exc:
                    if kube.status_of(exc) != 404:
                        raise
            # Its agent sees the record let go, stops IMEX and says so: the slot is freed.
            self._report(name, domain, ready=False)

    # -- the agents: report READY once the node's slot is written ------------------------

    def start(self) -> None:
        """Start reacting to clique objects, as every node's agent does."""
        self._watcher = threading.Thread(target=self._watch, name="agents", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        """Stop reacting."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)

    def check(self) -> None:
        """Raise the first error the agents met (a wait aborts on it instead of timing out)."""
        with self._lock:
            if self._errors:
                raise RuntimeError(f"the played agents failed: {self._errors[0]!r}")

    def _watch(self) -> None:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            while not self._stop.is_set():
                try:
                    self._watch_once(pool)
                except (ApiException, OSError, ValueError) as exc:
                    # A watch that broke is started again, as an informer relists.
                    print(f"agents: clique watch broke ({exc!r}); watching again")
                    self._stop.wait(1.0)  # a pause before the next watch, not a wait for state

    def _watch_once(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        objects = client.CustomObjectsApi(self._api)
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            objects.list_namespaced_custom_object, constants.GROUP, constants.STORAGE_VERSION,
            self._driver_ns, constants.CLIQUE_PLURAL, timeout_seconds=5,
        )  # fmt: skip
        for event in stream:
            if event["type"] in ("ADDED", "MODIFIED"):
                obj = event["object"]
                domain = obj["metadata"]["labels"].get(constants.COMPUTE_DOMAIN_LABEL, "")
                for daemon in obj.get("daemons") or []:
                    node = daemon["nodeName"]
                    if daemon.get("index") is not None and self._due(node, domain):
                        pool.submit(self._ready, node, domain)
            if self._stop.is_set():
                return

    def _due(self, node: str, domain: str) -> bool:
        with self._lock:
            if self._joined.get(node) != domain or self._reported.get(node) == domain:
                return False
            self._reported[node] = domain
            return True

    def _ready(self, node: str, domain: str) -> None:
        """Report READY for ``domain``, unless the node left it meanwhile."""
        try:
            with self._node_locks[node]:
                with self._lock:
                    if self._joined.get(node) != domain:
                        return
                self._report(node, domain, ready=True)
        except Exception as exc:  # noqa: BLE001 - recorded for check()
            with self._lock:
                self._errors.append(exc)
                self._reported.pop(node, None)

    def _report(self, node: str, domain: str, *, ready: bool) -> None:
        name, pod_uid = self._agent_pods[node]
        now = _now()
        reason = imex.Reason.READY if ready else imex.Reason.STOPPED
        report = imex.PodReport(
            ready=ready, reason=reason, message=f"domain {domain}: {reason}",
            domain_uid=domain, agent=imex.AgentStart.new(pod_uid, now=now),
        )  # fmt: skip
        body = imex.status_patch(report, uid=pod_uid, conditions=[], now=now)
        self._core.patch_namespaced_pod_status(name, self._driver_ns, body)
        with self._lock:
            self.reports += 1

    # -- helpers -------------------------------------------------------------------------

    @staticmethod
    def _each(work: Callable[[Any], None], items: Iterable[Any]) -> None:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            for future in [pool.submit(work, item) for item in items]:
                future.result()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
