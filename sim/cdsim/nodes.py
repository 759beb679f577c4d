"""Node objects for the simulated nodes: what a GB200 (or plain GPU) node's kubelet registers."""

from __future__ import annotations

from typing import Any

from cdsim import controlplane, topology

RACK_LABEL = "compute-domains.sim/rack"
"""Marks simulated nodes with their rack (absent for nodes outside racks)."""
SIM_LABEL = "compute-domains.sim/node"
NOT_READY_ANNOTATION = "compute-domains.sim/not-ready"
"""``"true"`` on a node: kwok reports it NotReady, as its kubelet would (a runtime down, say),
until the annotation goes (``kwok-stages.yaml``). Its Lease is still renewed, so the node
lifecycle controller sees a node that says it is not ready, not an unreachable one."""


def not_ready_patch(not_ready: bool) -> dict[str, Any]:
    """The merge patch that sets (or removes) :data:`NOT_READY_ANNOTATION`."""
    return {"metadata": {"annotations": {NOT_READY_ANNOTATION: "true" if not_ready else None}}}


def manifest(node: topology.SimNode, *, kubelet_version: str, boot_id: str) -> dict[str, Any]:
    """The Node object for ``node``, status included (kwok keeps it up to date)."""
    gb200 = node.rack is not None
    arch = "arm64" if gb200 else "amd64"
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "node.kubernetes.io/instance-type": "gb200-nvl72-tray" if gb200 else "hgx-h100",
        "nvidia.com/gpu.present": "true",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.product": node.gpus[0].name.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(node.gpus)),
        SIM_LABEL: "true",
    }
    if node.rack is not None:
        labels[RACK_LABEL] = str(node.rack)
    capacity = {
        "cpu": "144" if gb200 else "224",
        "memory": "884Gi" if gb200 else "2015Gi",
        "ephemeral-storage": "3500Gi",
        "pods": "110",
        "nvidia.com/gpu": str(len(node.gpus)),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": labels,
            "annotations": {controlplane.KWOK_NODE_ANNOTATION: "fake"},
        },
        "spec": {"podCIDR": node.pod_cidr, "podCIDRs": [node.pod_cidr]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "capacity": capacity,
            "allocatable": dict(capacity),
            "nodeInfo": {
                "architecture": arch,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.3 LTS (simulated)",
                "kernelVersion": "6.8.0-sim",
                "containerRuntimeVersion": "kwok://simulated",
                "kubeletVersion": kubelet_version,
                "kubeProxyVersion": "",
                "bootID": boot_id,
                "machineID": "",
                "systemUUID": "",
            },
        },
    }
