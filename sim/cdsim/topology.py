"""What the simulated cluster looks like: racks of GB200 nodes, their addresses and fabric.

Pure data, no I/O: a :class:`Topology` spec expands into :class:`SimNode` records that the
host-tree writer and the Node-object builder both read, so the two can never disagree.
Identifiers (cluster UUIDs, GPU UUIDs) are derived deterministically from the cluster name,
so the same spec always gives the same cluster.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import uuid
from collections.abc import Mapping

DEFAULT_DRIVER_VERSION = "580.95.05"
"""A current R580 driver: above the 570.158.01 minimum for DNS-name IMEX."""
DEFAULT_CLIQUE_ID = 32766
"""Every rack uses the same clique ID on purpose: only the cluster UUID tells racks apart,
which catches code that keys on the clique ID alone."""
ADDRESS_BLOCKS = 8
"""Clusters that can run side by side on one machine, each on its own loopback block."""


class FabricProfile(enum.StrEnum):
    """How a node's NVLink fabric looks to NVML."""

    HEALTHY = "healthy"
    """Registered (state COMPLETED, status SUCCESS) in its rack's clique."""
    NO_FABRIC = "no-fabric"
    """A GPU node without multi-node NVLink (say, H100 HGX): state NOT_SUPPORTED."""
    IN_PROGRESS = "in-progress"
    """Fabric registration still running (state IN_PROGRESS)."""
    DEGRADED = "degraded"
    """Registered, but NVML's health mask reports degraded bandwidth."""
    FAILED = "failed"
    """Registration finished with an error status."""
    MIXED_CLIQUES = "mixed-cliques"
    """The node's GPUs disagree: the last one reports another clique ID."""


@dataclasses.dataclass(frozen=True)
class NodeOverride:
    """A per-node deviation from the healthy default."""

    profile: FabricProfile = FabricProfile.HEALTHY
    driver_version: str | None = None


@dataclasses.dataclass(frozen=True)
class Topology:
    """Shape of the simulated cluster: ``racks`` NVL72 racks of ``nodes_per_rack`` nodes."""

    racks: int = 2
    nodes_per_rack: int = 18
    gpus_per_node: int = 4
    non_fabric_nodes: int = 0
    """Extra GPU nodes outside any rack (no NVLink fabric)."""
    driver_version: str = DEFAULT_DRIVER_VERSION
    overrides: Mapping[str, NodeOverride] = dataclasses.field(default_factory=dict)
    """Node name → deviation (profile, driver version)."""

    def __post_init__(self) -> None:
        if self.racks < 0 or self.nodes_per_rack < 1 or self.gpus_per_node < 1:
            raise ValueError(
                "topology needs racks >= 0, nodes-per-rack >= 1 and gpus-per-node >= 1, "
                f"got {self.racks} x {self.nodes_per_rack} x {self.gpus_per_node}"
            )
        if self.node_count() > 14 * 256:
            raise ValueError(f"{self.node_count()} nodes do not fit one address block")
        known = {n for n, _, _ in self.node_names()}
        unknown = sorted(set(self.overrides) - known)
        if unknown:
            raise ValueError(f"overrides name nodes not in the topology: {', '.join(unknown)}")

    def node_count(self) -> int:
        """Number of nodes the topology yields."""
        return self.racks * self.nodes_per_rack + self.non_fabric_nodes

    def node_names(self) -> list[tuple[str, int | None, int]]:
        """(name, rack or None, index in rack) of every node, racks first."""
        names: list[tuple[str, int | None, int]] = []
        for rack in range(self.racks):
            names += [(f"gb200-r{rack}-n{i:02d}", rack, i) for i in range(self.nodes_per_rack)]
        names += [(f"gpu-n{i:02d}", None, i) for i in range(self.non_fabric_nodes)]
        return names


@dataclasses.dataclass(frozen=True)
class FabricInfo:
    """One GPU's answer to NVML's GPU fabric-info call."""

    state: str
    """NVML fabric state without prefix: NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED."""
    status: str
    """NVML return code name without prefix (SUCCESS, ERROR_UNKNOWN, ...)."""
    cluster_uuid: str
    """Canonical lowercase UUID; all zeros when not registered."""
    clique_id: int
    health_mask: int
    """NVML fabric health mask (V2 call); 0 = no health information."""


@dataclasses.dataclass(frozen=True)
class SimGPU:
    """One GPU of a simulated node."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    fabric: FabricInfo


@dataclasses.dataclass(frozen=True)
class SimNode:
    """Everything about one simulated node that its Node object and host tree need."""

    name: str
    rack: int | None
    ip: str
    pod_cidr: str
    driver_version: str
    profile: FabricProfile
    gpus: tuple[SimGPU, ...]

    @property
    def clique(self) -> str | None:
        """The expected ``<clusterUUID>.<cliqueID>`` label value, or None without a clique."""
        if self.profile is not FabricProfile.HEALTHY and self.profile is not FabricProfile.DEGRADED:
            return None
        fabric = self.gpus[0].fabric
        return f"{fabric.cluster_uuid}.{fabric.clique_id}"


# NVML's degraded-bandwidth field of the health mask: bits 0-1, value 1 = "true".
_HEALTH_DEGRADED_BW = 0x1
_ZERO_UUID = str(uuid.UUID(int=0))


def rack_cluster_uuid(cluster_name: str, rack: int) -> str:
    """The NVLink cluster UUID of a rack: stable for a cluster name, distinct per rack."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster_name}.rack{rack}.nvlink"))


def _fabric(profile: FabricProfile, cluster_uuid: str, gpu_index: int, gpus: int) -> FabricInfo:
    if profile is FabricProfile.NO_FABRIC:
        return FabricInfo("NOT_SUPPORTED", "SUCCESS", _ZERO_UUID, 0, 0)
    if profile is FabricProfile.IN_PROGRESS:
        return FabricInfo("IN_PROGRESS", "SUCCESS", _ZERO_UUID, 0, 0)
    if profile is FabricProfile.FAILED:
        return FabricInfo("COMPLETED", "ERROR_UNKNOWN", _ZERO_UUID, 0, 0)
    health = _HEALTH_DEGRADED_BW if profile is FabricProfile.DEGRADED else 0
    clique = DEFAULT_CLIQUE_ID
    if profile is FabricProfile.MIXED_CLIQUES and gpu_index == gpus - 1:
        clique += 1
    return FabricInfo("COMPLETED", "SUCCESS", cluster_uuid, clique, health)


def address_block_network(block: int) -> ipaddress.IPv4Network:
    """The loopback /12 of address block ``block`` (one per side-by-side cluster)."""
    if not 0 <= block < ADDRESS_BLOCKS:
        raise ValueError(f"address block {block} out of range 0..{ADDRESS_BLOCKS - 1}")
    return ipaddress.IPv4Network(f"127.{16 * block + 16}.0.0/12")


def expand(topology: Topology, *, cluster_name: str, address_block: int) -> list[SimNode]:
    """Turn a topology into its nodes; node IPs and pod CIDRs come from the address block."""
    base = int(address_block_network(address_block).network_address)
    nodes: list[SimNode] = []
    for ordinal, (name, rack, _) in enumerate(topology.node_names()):
        override = topology.overrides.get(name, NodeOverride())
        profile = FabricProfile.NO_FABRIC if rack is None else override.profile
        cluster_uuid = rack_cluster_uuid(cluster_name, rack) if rack is not None else _ZERO_UUID
        gpus = tuple(
            SimGPU(
                index=g,
                uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{cluster_name}.{name}.gpu{g}")),
                name="NVIDIA GB200" if rack is not None else "NVIDIA H100 80GB HBM3",
                pci_bus_id=f"0000{g * 8 + 8:04x}:01:00.0",
                fabric=_fabric(profile, cluster_uuid, g, topology.gpus_per_node),
            )
            for g in range(topology.gpus_per_node)
        )
        # Node IPs fill 127.(B).x.y, pod /24s the fifteen 127.(B+1..B+15).x.0 ranges after it.
        node_ip = ipaddress.IPv4Address(base + 1 + ordinal)
        pod_net = ipaddress.IPv4Network((base + 65536 + 256 * ordinal, 24))
        nodes.append(
            SimNode(
                name=name,
                rack=rack,
                ip=str(node_ip),
                pod_cidr=str(pod_net),
                driver_version=override.driver_version or topology.driver_version,
                profile=profile,
                gpus=gpus,
            )
        )
    return nodes
