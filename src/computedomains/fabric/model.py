"""What fabric discovery reports about a node, and the verdict drawn from it.

NVML discovery (:mod:`computedomains.fabric.nvml`) produces a :class:`NodeReport`;
:func:`computedomains.fabric.classify.classify` turns it, together with the host checks, into
a :class:`Verdict`. Everything here is immutable data.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid

from computedomains.api import fabricverdict

ZERO_UUID = str(uuid.UUID(int=0))
"""The cluster UUID NVML reports for a GPU that is not registered in an NVLink domain."""


class FabricDiscoveryError(Exception):
    """Fabric information could not be read at all (library or file missing, NVML failing)."""


class FabricState(enum.StrEnum):
    """``nvmlGpuFabricState_t`` without its prefix."""

    NOT_SUPPORTED = "NOT_SUPPORTED"
    NOT_STARTED = "NOT_STARTED"
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"


@dataclasses.dataclass(frozen=True)
class GpuFabric:
    """One GPU's answer to NVML's fabric-info call."""

    state: FabricState
    status: str
    """Registration result as the ``nvmlReturn_t`` name without ``NVML_`` (``SUCCESS``, ...)."""
    cluster_uuid: str
    """Canonical lowercase UUID; :data:`ZERO_UUID` when not registered."""
    clique_id: int
    health_mask: int | None
    """NVML's fabric health mask; None when only the V1 call (no mask) was available."""

    @property
    def clique(self) -> str:
        """``<clusterUUID>.<cliqueID>``, the form of the ``nvidia.com/gpu.clique`` label."""
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU as discovery saw it."""

    index: int
    uuid: str
    name: str
    fabric: GpuFabric | None
    """None when NVML answers ERROR_NOT_SUPPORTED: this GPU has no fabric at all."""


@dataclasses.dataclass(frozen=True)
class NodeReport:
    """Everything discovery learnt about the node's GPUs and driver."""

    driver_version: str
    gpus: tuple[Gpu, ...]
    imex_channel_count: int | None
    """IMEX channels the driver exposes; None when the driver does not say."""


class Reason(enum.StrEnum):
    """CamelCase reasons for node conditions and Events."""

    NO_FABRIC = "NoNVLinkFabric"
    HEALTHY = "FabricHealthy"
    DEGRADED = "FabricDegraded"
    IN_PROGRESS = "FabricRegistrationInProgress"
    TIMED_OUT = "FabricRegistrationTimedOut"
    FAILED = "FabricRegistrationFailed"
    INCONSISTENT = "FabricCliquesInconsistent"
    DRIVER_TOO_OLD = "DriverTooOld"
    DRIVER_UNKNOWN = "DriverVersionUnrecognized"
    IMEX_MAJORS_MISSING = "ImexDeviceMajorsMissing"
    IMEX_MGMT_MISSING = "ImexManagementCapabilityMissing"
    HOST_IMEX_RUNNING = "HostImexRunning"
    DISCOVERY_FAILED = "FabricDiscoveryFailed"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The classification of a node's fabric, with what a human should do about it."""

    kind: fabricverdict.VerdictKind
    reason: Reason
    message: str
    clique: str = ""
    """``<clusterUUID>.<cliqueID>``; non-empty only for healthy and degraded nodes."""

    @property
    def usable(self) -> bool:
        """Whether the node serves ComputeDomain claims (:func:`fabricverdict.usable`)."""
        return fabricverdict.usable(self.kind)
