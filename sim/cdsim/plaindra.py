"""A plain DRA driver on the simulated nodes: the baseline a ComputeDomain claim is measured by.

A formation's time is the scheduler's and the kubelet's DRA path (claims made from a template,
allocation, prepare) plus what this driver adds (holds, slots, IMEX). To tell the two apart,
benchmarks time the same pods holding a claim of this driver, which adds nothing: per node one
ResourceSlice of ``devices`` plain devices, a DeviceClass, and a kubelet plugin that registers
like any other and prepares a claim by reading its allocation (one GET, as a real driver does),
with no CDI device and no wait. One process serves every node (one gRPC server per node).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import grpc

from cdsim import hosttree
from computedomains.api import resources
from computedomains.drapb import dra_v1_pb2, pluginregistration_v1_pb2, services
from computedomains.kube import client

DRIVER = "plain.sim.computedomains.io"
"""The driver's name, which is also its DeviceClass's."""


def device_class() -> dict[str, Any]:
    """The DeviceClass selecting every device of the plain driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def claim_template(name: str, namespace: str) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for one plain device."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": DRIVER}}]}
            }
        },
    }


def resource_slice(node: str, node_uid: str, *, devices: int) -> dict[str, Any]:
    """The node's ResourceSlice: ``devices`` plain devices, owned by the node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-{DRIVER}",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(devices)],
        },
    }


def prepared_devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(request, pool, device) of the plain devices allocated to ``claim``."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {})
    return [
        (str(r["request"]), str(r["pool"]), str(r["device"]))
        for r in results.get("results") or []
        if r.get("driver") == DRIVER
    ]


class _Registration:
    def __init__(self, endpoint: pathlib.Path) -> None:
        self._endpoint = str(endpoint)

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin", name=DRIVER, endpoint=self._endpoint,
            supported_versions=["v1.DRAPlugin"],
        )  # fmt: skip

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class _Service:
    def __init__(self, api: client.Client) -> None:
        self._api = api

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for ref in request.claims:
            entry = response.claims[ref.uid]
            try:
                claim = self._api.get(
                    resources.RESOURCE_CLAIMS.path(ref.name, namespace=ref.namespace)
                )
            except client.ApiError as exc:
                entry.error = f"reading ResourceClaim {ref.namespace}/{ref.name}: {exc}"
                continue
            if claim["metadata"].get("uid") != ref.uid:
                entry.error = f"ResourceClaim {ref.namespace}/{ref.name} is another claim now"
                continue
            for request_name, pool, device in prepared_devices(claim):
                entry.devices.add(request_names=[request_name], pool_name=pool, device_name=device)
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for ref in request.claims:
            response.claims[ref.uid].error = ""
        return response


def _serve(node: hosttree.HostTree, api: client.Client) -> grpc.Server:
    endpoint = node.kubelet_plugins / "plain" / "dra.sock"
    registration = node.kubelet_registry / "plain.sock"
    endpoint.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    services.serve(server, services.DRA["v1.DRAPlugin"], _Service(api))
    services.serve(server, services.REGISTRATION, _Registration(endpoint))
    server.add_insecure_port(f"unix://{endpoint}")
    server.add_insecure_port(f"unix://{registration}")
    server.start()
    return server


@contextlib.contextmanager
def running(
    api: client.Client, trees: Mapping[str, hosttree.HostTree], *, devices: int = 8
) -> Iterator[None]:
    """The plain driver on every node of ``trees`` (name → host tree) while in the block."""
    api.create(resources.DEVICE_CLASSES.path(), device_class())
    servers: list[grpc.Server] = []
    try:
        for name, tree in trees.items():
            node = api.get(resources.NODES.path(name))
            api.create(
                resources.RESOURCE_SLICES.path(),
                resource_slice(name, node["metadata"]["uid"], devices=devices),
            )
            servers.append(_serve(tree, api))
        yield
    finally:
        for server in servers:
            server.stop(grace=None)
        for tree in trees.values():
            (tree.kubelet_registry / "plain.sock").unlink(missing_ok=True)
        for name in trees:
            with contextlib.suppress(client.ApiError):
                api.delete(resources.RESOURCE_SLICES.path(f"{name}-{DRIVER}"))
        with contextlib.suppress(client.ApiError):
            api.delete(resources.DEVICE_CLASSES.path(DRIVER))
