"""Run the kubelet plugin for one simulated node and talk to it as the kubelet does.

Used where a test needs exact control over the calls (benchmarks, crash timing); the normal
flows go through the simulated kubelet instead.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import sys
import uuid
from typing import Any, cast

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cdsim import cluster as sim_cluster
from cdsim import hosttree, ports, processes
from computedomains import nodefiles, waiting
from computedomains.api import constants, crds, imex
from computedomains.drapb import dra_v1_pb2, services


def install_crds(api: client.ApiClient) -> None:
    """Create the ComputeDomain CRDs (from the generator) unless present; wait Established."""
    ext = client.ApiextensionsV1Api(api)
    for resource in crds.RESOURCES:
        body = crds.manifest(resource)
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as exc:
            if exc.status != 409:
                raise

        def established(name: str = body["metadata"]["name"]) -> bool:
            crd = ext.read_custom_resource_definition(name)
            return any(
                c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
            )

        waiting.until(f"CRD {body['metadata']['name']} to be Established", established, timeout=30)


def create_domain(api: client.ApiClient, namespace: str, name: str = "cd") -> dict[str, Any]:
    """A ComputeDomain in ``namespace``; returns the created object."""
    body = {
        "apiVersion": constants.API_VERSION_V1BETA2,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    # At the storage version: these tests run no conversion webhook.
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        constants.GROUP,
        constants.STORAGE_VERSION,
        namespace,
        constants.COMPUTE_DOMAIN_PLURAL,
        body,
    )
    return cast(dict[str, Any], created)


def allocated_claim(
    api: client.ApiClient,
    namespace: str,
    *,
    node: str,
    device: str,
    parameters: dict[str, Any],
    request: str = "channel",
    device_class: str = constants.CHANNEL_DEVICE_CLASS,
) -> dict[str, str]:
    """A ResourceClaim allocated by hand (as the scheduler would) to ``device`` on ``node``."""
    resource = client.ResourceV1Api(api)
    name = f"claim-{uuid.uuid4().hex[:8]}"
    created = resource.create_namespaced_resource_claim(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request,
                            "exactly": {"deviceClassName": device_class},
                        }
                    ]
                }
            },
        },
    )
    created.status = {  # type: ignore[assignment]  # the API takes the raw form
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": request,
                        "driver": constants.DRIVER_NAME,
                        "pool": node,
                        "device": device,
                    }
                ],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": [request],
                        "opaque": {"driver": constants.DRIVER_NAME, "parameters": parameters},
                    }
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status(name, namespace, created)
    return {"namespace": namespace, "name": name, "uid": str(created.metadata.uid)}


def channel_parameters(domain_uid: str, mode: str = "Single") -> dict[str, Any]:
    """A ComputeDomainChannelConfig."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CHANNEL_CONFIG_KIND,
        "domainID": domain_uid,
        "allocationMode": mode,
    }


@dataclasses.dataclass
class PluginProcess:
    """The plugin as a local process for one simulated node, with admin credentials."""

    sim: sim_cluster.SimCluster
    node: str
    log_dir: pathlib.Path
    child: processes.Managed | None = None

    @property
    def tree(self) -> hosttree.HostTree:
        """The node's host tree."""
        return self.sim.host_trees[self.node]

    @property
    def verdict_file(self) -> pathlib.Path:
        """Where node-init would write the fabric verdict."""
        return self.tree.root / "var/run/compute-domains/fabric-verdict.json"

    @property
    def imex_status_file(self) -> pathlib.Path:
        """Where the IMEX agent would write its status."""
        return imex_status_file(self.tree)

    @property
    def dra_socket(self) -> pathlib.Path:
        """The plugin's DRA socket."""
        return self.tree.kubelet_plugins / constants.DRIVER_NAME / "dra.sock"

    def start(self, *, imex_ready_timeout: float = 20) -> None:
        """Start the plugin and wait until its DRA socket answers."""
        argv = [
            sys.executable,
            "-m",
            "computedomains",
            "kubelet-plugin",
            f"--node-name={self.node}",
            f"--kubeconfig={self.sim.kubeconfig}",
            "--namespace=default",
            f"--kubelet-registry-dir={self.tree.kubelet_registry}",
            f"--kubelet-plugins-dir={self.tree.kubelet_plugins}",
            f"--cdi-root={self.tree.cdi}",
            f"--proc-root={self.tree.root / 'proc'}",
            f"--fabric-verdict-file={self.verdict_file}",
            f"--imex-status-file={self.imex_status_file}",
            f"--imex-ready-timeout={imex_ready_timeout}",
            f"--http-bind=127.0.0.1:{ports.free_port()}",
        ]
        # As the chart sets it: glibc's per-thread arenas otherwise inflate a threaded server.
        env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
        self.child = processes.start(f"plugin-{self.node}", argv, log_dir=self.log_dir, env=env)

        def answers() -> bool:
            self.prepare([])
            return True

        waiting.until(
            f"the plugin on {self.node} to answer on {self.dra_socket}",
            answers,
            timeout=30,
            abort=self.child.check_running,
            retry_on=(grpc.RpcError,),
        )

    def stop(self) -> None:
        """Stop the plugin (SIGTERM, then SIGKILL)."""
        if self.child is not None:
            processes.stop_all([self.child])

    def prepare(self, claims: list[dict[str, str]]) -> Any:
        """One NodePrepareResources call."""
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as channel:
            request = dra_v1_pb2.NodePrepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(**c) for c in claims]
            )
            return services.Client(channel, services.DRA["v1.DRAPlugin"]).call(
                "NodePrepareResources", request, timeout=45
            )

    def unprepare(self, claims: list[dict[str, str]]) -> Any:
        """One NodeUnprepareResources call."""
        with grpc.insecure_channel(f"unix://{self.dra_socket}") as channel:
            request = dra_v1_pb2.NodeUnprepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(**c) for c in claims]
            )
            return services.Client(channel, services.DRA["v1.DRAPlugin"]).call(
                "NodeUnprepareResources", request, timeout=45
            )

    def write_verdict(self, verdict: str = "healthy") -> None:
        """Write a fabric verdict as node-init would (from the node's fake NVML topology)."""
        node = next(n for n in self.sim.nodes if n.name == self.node)
        nodefiles.write_json(
            self.verdict_file,
            nodefiles.document("FabricVerdict", {
                "node": self.node, "verdict": verdict, "reason": "Test", "message": "by a test",
                "clique": (node.clique or "") if verdict in ("healthy", "degraded") else "",
                "driverVersion": node.driver_version,
                "imexChannelCount": hosttree.IMEX_CHANNEL_COUNT, "gpus": [], "observedAt": "",
            }),
        )  # fmt: skip

    def write_imex(self, domain_uid: str, state: str = "READY", message: str = "") -> None:
        """Write the IMEX status as the agent would."""
        write_imex_status(self.tree, self.node, domain_uid, state, message)


def imex_status_file(tree: hosttree.HostTree) -> pathlib.Path:
    """Where the IMEX agent writes a node's IMEX status."""
    return tree.imex_status


def write_imex_status(
    tree: hosttree.HostTree, node: str, domain_uid: str, state: str = "READY", message: str = ""
) -> None:
    """Write a node's IMEX status as a live agent would (until the agent exists).

    Its heartbeat is now: the plugin believes it for ``--imex-status-max-age`` seconds.
    """
    now = datetime.datetime.now(datetime.UTC)
    imex.write_status(
        imex_status_file(tree),
        imex.ImexStatus(node=node, domain_uid=domain_uid, state=imex.State(state),
                        message=message, updated_at=now, heartbeat_at=now,
                        agent=imex.AgentStart.new("test", now=now)),
    )  # fmt: skip
