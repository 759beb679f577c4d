"""Run the IMEX agent for simulated nodes as the chart will, and look at what it did.

Each agent gets a pod of its own (labelled as the chart labels agent pods, so its condition
can be written; kwok gives it a loopback pod IP), the flags of docs/control-side.md with
paths inside the node's host tree, and admin credentials. The fake IMEX it starts is the one
the simulated cluster installed under the node's ``usr/bin``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import urllib.request
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import hosttree, ports, processes
from cdsim.fakeimex import config as fake_config
from computedomains import nodefiles, waiting
from computedomains.api import constants, models
from tests.support import kube

KUBELET_LINE = "10.0.0.1\tkubelet-managed-entry"
"""A line the agent must leave alone in the hosts file, as it must the kubelet's."""


@dataclasses.dataclass
class Agent:
    """One agent process and its pod, for one simulated node."""

    sim: sim_cluster.SimCluster
    api: client.ApiClient
    namespace: str
    node: str
    log_dir: pathlib.Path
    pod_ip: str = ""
    pod_uid: str = ""
    http_port: int = 0
    child: processes.Managed | None = None

    @property
    def tree(self) -> hosttree.HostTree:
        """The node's host tree."""
        return self.sim.host_trees[self.node]

    @property
    def state_dir(self) -> pathlib.Path:
        """This harness's node-local folder, apart from the chart's.

        While the package's chart fixture is installed, the chart's own IMEX agent and
        node-init run on these nodes too; they must not share files with the test's agents.
        """
        return self.tree.root / "var/run/compute-domains/test-imex-agent"

    @property
    def imex_dir(self) -> pathlib.Path:
        """The agent's IMEX folder (``--imex-dir``)."""
        return self.state_dir / "imex"

    @property
    def hosts_file(self) -> pathlib.Path:
        """The hosts file the agent writes and the fake IMEX reads (a pod's /etc/hosts)."""
        return self.imex_dir / "hosts"

    @property
    def verdict_file(self) -> pathlib.Path:
        """The fabric verdict the agent reads, written by the test as node-init would."""
        return self.state_dir / "fabric-verdict.json"

    @property
    def pod_name(self) -> str:
        """The agent's pod."""
        return f"imex-agent-{self.node}"

    @property
    def clique(self) -> str:
        """The node's clique, as node-init would find it."""
        return next(n.clique for n in self.sim.nodes if n.name == self.node) or ""

    def write_verdict(self, verdict: str = "healthy") -> None:
        """The fabric verdict node-init would write."""
        nodefiles.write_json(
            self.verdict_file,
            nodefiles.document("FabricVerdict", {
                "node": self.node, "verdict": verdict, "reason": "Test", "message": "by a test",
                "clique": self.clique if verdict in ("healthy", "degraded") else "",
                "driverVersion": "580.95.05", "imexChannelCount": 2048, "gpus": [],
                "observedAt": "",
            }),
        )  # fmt: skip

    def create_pod(self) -> None:
        """The agent's pod, bound to the node; waits for kwok to give it an IP."""
        core = client.CoreV1Api(self.api)
        core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {
                    "name": self.pod_name,
                    "labels": {constants.COMPONENT_LABEL: constants.IMEX_AGENT_COMPONENT},
                },
                "spec": {
                    "nodeName": self.node,
                    "containers": [{"name": "imex-agent", "image": "compute-domains:test"}],
                },
            },
        )
        pod = kube.wait_for_pod(
            self.api, self.namespace, self.pod_name, "to get an IP", lambda p: p.status.pod_ip
        )
        self.pod_ip, self.pod_uid = pod.status.pod_ip, pod.metadata.uid

    def start(self, *, extra_env: dict[str, str] | None = None) -> None:
        """Start the agent (pod first, if needed) as the chart's DaemonSet will."""
        if not self.pod_ip:
            self.create_pod()
        self.imex_dir.mkdir(parents=True, exist_ok=True)
        self.hosts_file.write_text(f"127.0.0.1\tlocalhost\n{KUBELET_LINE}\n")
        self.http_port = ports.free_port()
        argv = [
            sys.executable, "-m", "computedomains", "imex-agent",
            f"--node-name={self.node}", f"--namespace={self.namespace}",
            f"--pod-name={self.pod_name}", f"--pod-uid={self.pod_uid}", f"--pod-ip={self.pod_ip}",
            f"--kubeconfig={self.sim.kubeconfig}", f"--driver-root={self.tree.root}",
            f"--imex-dir={self.imex_dir}", f"--hosts-file={self.hosts_file}",
            f"--fabric-verdict-file={self.verdict_file}",
            "--max-nodes-per-clique=18", "--imex-start-timeout=30", "--imex-stop-timeout=5",
            f"--http-bind=127.0.0.1:{self.http_port}",
        ]  # fmt: skip
        env = {**os.environ, fake_config.HOSTS_ENV: str(self.hosts_file), **(extra_env or {})}
        self.child = processes.start(f"imex-agent-{self.node}", argv, log_dir=self.log_dir, env=env)

    def stop(self) -> None:
        """Stop the agent (it stops its IMEX)."""
        if self.child is not None:
            processes.stop_all([self.child], grace=20)
            self.child = None

    # -- what it did ----------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """The node's ImexStatus file."""
        return nodefiles.read_json(self.imex_dir / "status.json", kind="ImexStatus")

    def condition(self) -> Any | None:
        """The agent pod's IMEXReady condition."""
        pod = client.CoreV1Api(self.api).read_namespaced_pod(self.pod_name, self.namespace)
        return kube.pod_condition(pod, constants.IMEX_READY_CONDITION)

    def imex_nodes(self) -> dict[str, Any]:
        """``nvidia-imex-ctl -N -j`` on the node: the fake IMEX's peers, pid and reloads."""
        done = subprocess.run(
            [str(self.tree.root / "usr/bin/nvidia-imex-ctl"), "-N", "-j",
             "-c", str(self.imex_dir / "imexd.cfg")],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise OSError(f"nvidia-imex-ctl failed: {done.stdout} {done.stderr}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def metrics(self) -> str:
        """The agent's /metrics."""
        url = f"http://127.0.0.1:{self.http_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def log_tail(self) -> str:
        """The end of the agent's log, for failure messages."""
        return processes.log_tail(self.log_dir / f"imex-agent-{self.node}.log", 40)

    def wait_status(self, what: str, predicate: Any, *, timeout: float = 60) -> dict[str, Any]:
        """Poll the status file until ``predicate(status)`` holds; returns the status."""

        def check() -> dict[str, Any] | None:
            status = self.status()
            return status if status is not None and predicate(status) else None

        def abort() -> None:
            if self.child is not None:
                self.child.check_running()

        try:
            return waiting.until(f"{self.node}: {what}", check, timeout=timeout, abort=abort,
                                 retry_on=(nodefiles.CorruptNodeFile,))  # fmt: skip
        except waiting.WaitTimeout as exc:
            raise AssertionError(
                f"{exc}; status {self.status()}; log:\n{self.log_tail()}"
            ) from None

    def wait_state(self, state: str, domain: str, *, timeout: float = 60) -> dict[str, Any]:
        """Wait for the status file to say ``state`` for ``domain``."""
        return self.wait_status(
            f"IMEX {state} for domain {domain!r}",
            lambda s: s["state"] == state and s["domainUID"] == domain,
            timeout=timeout,
        )

    def wait_condition(self, status: str, reason: str, *, timeout: float = 60) -> Any:
        """Wait for the pod condition to have ``status`` and ``reason``."""

        def check() -> Any:
            condition = self.condition()
            ok = condition is not None and (condition.status, condition.reason) == (status, reason)
            return condition if ok else None

        return waiting.until(
            f"{self.pod_name} condition {status}/{reason}", check, timeout=timeout,
            retry_on=(ApiException,),
        )  # fmt: skip


def write_clique(
    api: client.ApiClient,
    namespace: str,
    domain: str,
    members: list[Agent],
    *,
    slots: list[int] | None = None,
    named: list[Agent] | None = None,
) -> None:
    """Create or replace the ComputeDomainClique of ``members`` as the controller would.

    It names ``named`` (default: every one of ``members``) as the domain's members: the
    record the agents follow. A member listed but not named left and keeps its slot.
    """
    clique = members[0].clique
    name = f"{domain}.{clique}"
    daemons = [
        {"nodeName": a.node, "ipAddress": a.pod_ip, "cliqueID": clique, "index": slot,
         "status": "NotReady"}
        for a, slot in zip(members, slots or range(len(members)), strict=True)
    ]  # fmt: skip
    body = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CLIQUE_KIND,
        "metadata": {
            "name": name,
            "labels": {constants.COMPUTE_DOMAIN_LABEL: domain, constants.CLIQUE_ID_LABEL: clique},
            "annotations": {constants.CLIQUE_MEMBERS_ANNOTATION: models.clique_members_value(
                {a.node for a in (members if named is None else named)})},
        },
        "daemons": daemons,
    }  # fmt: skip
    custom = client.CustomObjectsApi(api)
    args = (constants.GROUP, constants.VERSION, namespace, constants.CLIQUE_PLURAL)
    try:
        current = custom.get_namespaced_custom_object(*args, name)
    except ApiException as exc:
        if kube.status_of(exc) != 404:
            raise
        custom.create_namespaced_custom_object(*args, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    custom.replace_namespaced_custom_object(*args, name, body)


def delete_clique(api: client.ApiClient, namespace: str, domain: str, clique: str) -> None:
    """Delete a clique object (gone already is fine)."""
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            constants.GROUP, constants.VERSION, namespace, constants.CLIQUE_PLURAL,
            f"{domain}.{clique}",
        )  # fmt: skip
    except ApiException as exc:
        if kube.status_of(exc) != 404:
            raise
