"""Run the controller as a process, play its peers (plugin, agents) and read what it wrote.

Until the IMEX agent runs in these tests, :class:`Agents` creates pods that look like agent
pods (kwok runs them and gives them an IP) and sets their IMEXReady condition the way the
agent will. :class:`NodeLabels` allocates claims on nodes as the scheduler would, and changes
clique labels as node-init would (or forges a domain label), and puts every touched label back
afterwards.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import signal
import sys
import urllib.error
import urllib.request
import uuid
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import parser

from cdsim import ports, processes
from computedomains import waiting
from computedomains.api import constants, imex
from tests.support import kube, plugin

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
G, V = constants.GROUP, constants.STORAGE_VERSION


@dataclasses.dataclass
class ControllerProcess:
    """``computedomains controller`` with admin credentials, as a local process."""

    kubeconfig: pathlib.Path
    namespace: str
    log_dir: pathlib.Path
    name: str = "controller"
    args: tuple[str, ...] = ()
    port: int = dataclasses.field(default_factory=ports.free_port)
    child: processes.Managed | None = None

    def start(self) -> None:
        """Start it and wait until its caches are synced (``/readyz``)."""
        argv = [
            sys.executable, "-m", "computedomains", "controller",
            f"--kubeconfig={self.kubeconfig}", f"--namespace={self.namespace}",
            f"--pod-name={self.name}", f"--http-bind=127.0.0.1:{self.port}", *self.args,
        ]  # fmt: skip
        self.child = processes.start(self.name, argv, log_dir=self.log_dir, env=dict(os.environ))
        waiting.until(
            f"{self.name} to be ready", lambda: self.probe("/readyz") == 200, timeout=60,
            abort=self.child.check_running,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        """The process ID."""
        assert self.child is not None
        return self.child.pid

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) and reap."""
        if self.child is not None:
            processes.stop_all([self.child])

    def kill(self) -> None:
        """SIGKILL by PID, as a node failure would, and reap."""
        assert self.child is not None
        os.kill(self.child.pid, signal.SIGKILL)
        self.child.popen.wait(timeout=10)

    def log_tail(self, lines: int = 120) -> str:
        """The last ``lines`` lines of its log (a failed test shows them: conftest.py)."""
        log = self.log_dir / f"{self.name}.log"
        if not log.exists():
            return f"(no log at {log})"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def probe(self, path: str) -> int:
        """The HTTP status of ``path`` on the controller's endpoint (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of ``/metrics``, keyed by (name, sorted labels)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(text)
            for s in family.samples
        }

    def sample(self, name: str, **labels: str) -> float:
        """One sample's value (0 when absent)."""
        return self.samples().get((name, tuple(sorted(labels.items()))), 0.0)

    def write_counts(self) -> dict[tuple[str, str, str], float]:
        """API writes so far (leases excluded) by (verb, resource, code): a diff names them."""
        counts: dict[tuple[str, str, str], float] = {}
        for (name, labels), count in self.samples().items():
            fields = dict(labels)
            if name != "computedomains_controller_api_requests_total":
                continue
            if fields["verb"] not in WRITE_VERBS or fields["resource"] == "leases":
                continue
            counts[(fields["verb"], fields["resource"], fields["code"])] = count
        return counts

    def writes(self, *, resources: tuple[str, ...] = ()) -> float:
        """API writes so far (leases excluded), optionally only to ``resources``."""
        return sum(
            count
            for (_, resource, _), count in self.write_counts().items()
            if not resources or resource in resources
        )

    def conflicts(self) -> float:
        """409 answers so far (leases and nodes excluded).

        A node label write carries the cached Node's resourceVersion, which any change of the
        node (a heartbeat, node-init) makes stale: its conflict reads the node and writes again.
        """
        return sum(
            count
            for (name, labels), count in self.samples().items()
            if name == "computedomains_controller_api_requests_total"
            and dict(labels)["code"] == "409"
            and dict(labels)["resource"] not in ("leases", "nodes")
        )

    def reconciles(self) -> float:
        """Reconciles done so far."""
        return self.sample("computedomains_controller_reconciles_total")


@dataclasses.dataclass
class NodeLabels:
    """Sets node labels and remembers each label's first value, to restore it afterwards.

    With ``claims_namespace``, giving a node a domain allocates a claim of that domain on the
    node there instead (as the scheduler would), and taking it away deletes the claim: the
    controller writes the domain label itself, as the copy of its record. Without, the domain
    label is written by hand: forged.
    """

    api: client.ApiClient
    claims_namespace: str = ""
    original: dict[tuple[str, str], str | None] = dataclasses.field(default_factory=dict)
    claims: dict[str, str] = dataclasses.field(default_factory=dict)
    """Node → the claim this helper allocated there."""

    def set(self, nodes: list[str], **labels: str | None) -> None:
        """Set (or with None remove) labels, given by constant name, e.g. ``domain="uid"``."""
        keys = {"domain": constants.COMPUTE_DOMAIN_LABEL, "clique": constants.CLIQUE_LABEL}
        core = client.CoreV1Api(self.api)
        for node in nodes:
            if "domain" in labels and self.claims_namespace:
                self._claim(node, labels["domain"])
            current = core.read_node(node).metadata.labels or {}
            patch = {}
            for short, value in labels.items():
                key = keys[short]
                self.original.setdefault((node, key), current.get(key))
                if short != "domain" or not self.claims_namespace:
                    patch[key] = value
            if patch:
                core.patch_node(node, {"metadata": {"labels": patch}})

    def _claim(self, node: str, domain: str | None) -> None:
        self._unclaim(node)
        if domain:
            claim = plugin.allocated_claim(
                self.api, self.claims_namespace, node=node, device="channel-0",
                parameters=plugin.channel_parameters(domain),
            )  # fmt: skip
            self.claims[node] = claim["name"]

    def _unclaim(self, node: str) -> None:
        name = self.claims.pop(node, None)
        if name is None:
            return
        try:
            client.ResourceV1Api(self.api).delete_namespaced_resource_claim(
                name, self.claims_namespace
            )
        except ApiException as exc:
            if kube.status_of(exc) != 404:
                raise

    def restore(self) -> None:
        """Put every touched label back as it was (and delete the claims made)."""
        for node in list(self.claims):
            self._unclaim(node)
        core = client.CoreV1Api(self.api)
        by_node: dict[str, dict[str, str | None]] = {}
        for (node, key), value in self.original.items():
            by_node.setdefault(node, {})[key] = value
        for node, patch in by_node.items():
            try:
                core.patch_node(node, {"metadata": {"labels": patch}})
            except ApiException as exc:
                if kube.status_of(exc) != 404:
                    raise
        self.original.clear()


@dataclasses.dataclass
class Agents:
    """Stand-ins for the IMEX agent pods in the driver namespace, one per node."""

    api: client.ApiClient
    namespace: str
    pods: dict[str, Any] = dataclasses.field(default_factory=dict)

    def ensure(self, nodes: list[str]) -> dict[str, str]:
        """An agent pod on each node (created unless present); returns node → pod IP."""
        core = client.CoreV1Api(self.api)
        for node in nodes:
            if node in self.pods:
                continue
            name = f"imex-agent-{node}-{uuid.uuid4().hex[:4]}"
            core.create_namespaced_pod(self.namespace, {
                "metadata": {"name": name,
                             "labels": {constants.COMPONENT_LABEL: constants.IMEX_AGENT_COMPONENT}},
                "spec": {"nodeName": node,
                         "containers": [{"name": imex.AGENT_CONTAINER, "image": "agent"}],
                         "terminationGracePeriodSeconds": 0},
            })  # fmt: skip
            self.pods[node] = name
        return {node: self.ip(node) for node in nodes}

    def ip(self, node: str) -> str:
        """The agent pod's IP, once kwok has started it."""
        pod = kube.wait_for_pod(
            self.api, self.namespace, self.pods[node], "to have an IP",
            lambda p: p.status.pod_ip, timeout=60,
        )  # fmt: skip
        return str(pod.status.pod_ip)

    def report(self, nodes: list[str], uid: str, reason: str, *, detail: str = "") -> None:
        """Publish the report of the agents on ``nodes`` as the agent does (``api/imex.py``).

        Each report comes from a run started now, after kwok reported the container running.
        """
        core = client.CoreV1Api(self.api)
        for node in nodes:
            pod_uid = core.read_namespaced_pod(self.pods[node], self.namespace).metadata.uid
            now = datetime.datetime.now(datetime.UTC)
            report = imex.PodReport(
                ready=reason == imex.Reason.READY, reason=reason,
                message=f"domain {uid}: {detail or reason}", domain_uid=uid,
                agent=imex.AgentStart.new(pod_uid, now=now),
            )  # fmt: skip
            body = imex.status_patch(report, uid=pod_uid, conditions=[], now=now)
            core.patch_namespaced_pod_status(self.pods[node], self.namespace, body)

    def remove(self, node: str) -> None:
        """Delete the agent pod of ``node``."""
        client.CoreV1Api(self.api).delete_namespaced_pod(
            self.pods.pop(node), self.namespace, grace_period_seconds=0
        )


# -- the domain and its cliques, as a test reads them ----------------------------------------


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def read_domain(api: client.ApiClient, namespace: str, name: str = "cd") -> dict[str, Any]:
    obj = custom(api).get_namespaced_custom_object(
        G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
    )
    return cast(dict[str, Any], obj)


def cliques(api: client.ApiClient, driver_ns: str, uid: str) -> dict[str, dict[str, Any]]:
    """The domain's cliques by clique ID."""
    items = custom(api).list_namespaced_custom_object(
        G, V, driver_ns, constants.CLIQUE_PLURAL,
        label_selector=f"{constants.COMPUTE_DOMAIN_LABEL}={uid}",
    )["items"]  # fmt: skip
    return {c["metadata"]["labels"][constants.CLIQUE_ID_LABEL]: c for c in items}


def slots(api: client.ApiClient, driver_ns: str, uid: str) -> dict[str, dict[str, int]]:
    """clique → node → slot."""
    return {
        clique: {d["nodeName"]: d["index"] for d in obj.get("daemons", [])}
        for clique, obj in cliques(api, driver_ns, uid).items()
    }


def wait_slots(
    api: client.ApiClient, driver_ns: str, uid: str, want: dict[str, dict[str, int]], what: str
) -> None:
    seen: list[dict[str, dict[str, int]]] = [{}]

    def check() -> bool:
        seen[0] = slots(api, driver_ns, uid)
        return seen[0] == want

    try:
        waiting.until(what, check, timeout=60)
    except waiting.WaitTimeout as exc:
        raise AssertionError(f"{exc}; last seen: {seen[0]}") from exc


def wait_status(
    api: client.ApiClient, namespace: str, shown: str, overall: str = "Ready"
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = read_domain(api, namespace).get("status") or {}
        ok = status.get("nodesReady") == shown and status.get("status") == overall
        return status if ok else None

    return waiting.until(f"domain status {overall} {shown}", check, timeout=60)


def event_reasons(api: client.ApiClient, namespace: str) -> dict[str, list[str]]:
    """Reason → messages of the Events on ComputeDomains in ``namespace``."""
    out: dict[str, list[str]] = {}
    for event in client.CoreV1Api(api).list_namespaced_event(namespace).items:
        if event.involved_object.kind == constants.COMPUTE_DOMAIN_KIND:
            out.setdefault(event.reason, []).append(event.message)
    return out


def wait_event(api: client.ApiClient, namespace: str, reason: str) -> list[str]:
    return waiting.until(
        f"Event {reason}", lambda: event_reasons(api, namespace).get(reason), timeout=60
    )


def create_domain(api: client.ApiClient, namespace: str, *, mode: str = "Single") -> str:
    """A ComputeDomain ``cd`` (template ``cd-channel``); returns its UID."""
    body = {
        "apiVersion": constants.API_VERSION_V1BETA2, "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "cd"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"},
                             "allocationMode": mode}},
    }  # fmt: skip
    created = custom(api).create_namespaced_custom_object(
        G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, body
    )
    return str(created["metadata"]["uid"])


def delete_domain(api: client.ApiClient, namespace: str, name: str = "cd") -> None:
    """Delete the domain and wait until the controller has let it go."""
    custom(api).delete_namespaced_custom_object(
        G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, name
    )

    def gone() -> bool:
        try:
            read_domain(api, namespace, name)
        except ApiException as exc:
            return kube.status_of(exc) == 404
        return False

    waiting.until(f"domain {namespace}/{name} to be deleted", gone, timeout=60)


def touch(api: client.ApiClient, namespace: str) -> None:
    """Change the domain's metadata only: the controller reconciles, with nothing to do."""
    custom(api).patch_namespaced_custom_object(
        G, V, namespace, constants.COMPUTE_DOMAIN_PLURAL, "cd",
        {"metadata": {"annotations": {"test/touched": uuid.uuid4().hex}}},
    )  # fmt: skip
