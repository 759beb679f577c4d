"""Typed ComputeDomain API objects, wire-compatible with the incumbent driver's v1beta1.

``ComputeDomain`` and ``ComputeDomainClique`` are the custom resources; ``ChannelConfig``
and ``DaemonConfig`` are the opaque device configs the controller writes into
ResourceClaimTemplates and the kubelet plugin reads back on prepare. The field declarations
here are also the source of the CRD schemas (:mod:`computedomains.api.crds`), so a default,
an enum or a required field cannot differ between the two.

Compatibility notes, where the choices are not obvious:

- ``spec`` itself is optional at the top level, as in the incumbent's CRD: requiring it now
  would make any stored object without one impossible to update, even to drop a finalizer.
- ``index`` of a node has no default (``None`` when absent); ``numNodes`` and
  ``allocationMode`` have defaults, so objects written before those fields existed parse.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

from computedomains.api import constants
from computedomains.api.schema import DNS1123_SUBDOMAIN, Model, ValidationError, field

IMMUTABLE_SPEC_MESSAGE = "A computeDomain.spec is immutable"


class AllocationMode(enum.StrEnum):
    """How many IMEX channels a workload container gets."""

    ALL = "All"
    """Every channel of the IMEX domain."""
    SINGLE = "Single"
    """Channel 0 only."""


class Status(enum.StrEnum):
    """Readiness of a ComputeDomain, of one of its nodes, or of one clique daemon."""

    READY = "Ready"
    NOT_READY = "NotReady"


# -- ComputeDomain ------------------------------------------------------------------------


class ResourceClaimTemplateRef(Model):
    """The workload ResourceClaimTemplate the controller creates for a ComputeDomain."""

    # Validated here, not only when the controller creates the template: a name the API server
    # would refuse there is then refused with the ComputeDomain itself, where the user looks.
    name: str = field(
        "name",
        "Name of the ResourceClaimTemplate, created in the ComputeDomain's namespace: a "
        "lowercase RFC 1123 subdomain of at most 253 characters.",
        string_format=DNS1123_SUBDOMAIN,
    )


class ChannelSpec(Model):
    """The IMEX channel that workload pods of a ComputeDomain claim."""

    resource_claim_template: ResourceClaimTemplateRef = field(
        "resourceClaimTemplate",
        "The ResourceClaimTemplate that workload pods reference to join the ComputeDomain.",
    )
    allocation_mode: AllocationMode = field(
        "allocationMode",
        "Single gives each workload container IMEX channel 0; All gives it every channel.",
        default=AllocationMode.SINGLE,
    )


class ComputeDomainSpec(Model):
    """What a ComputeDomain asks for; fixed once the object exists."""

    num_nodes: int = field(
        "numNodes",
        "Deprecated. Number of nodes expected to join. Above zero, the ComputeDomain is Ready "
        "only once at least that many nodes are Ready; zero leaves readiness to the nodes "
        "that joined.",
        default=0,
        minimum=0,
    )
    channel: ChannelSpec = field("channel", "The IMEX channel workload pods claim.")


class ComputeDomainNode(Model):
    """One node running an IMEX daemon of the ComputeDomain."""

    name: str = field("name", "Node name.")
    ip_address: str = field("ipAddress", "IP address of the node's IMEX daemon pod.")
    clique_id: str = field(
        "cliqueID",
        "NVLink clique of the node, <clusterUUID>.<cliqueID>; empty on a node without fabric.",
    )
    index: int | None = field(
        "index",
        "Index of the daemon within its clique, unique per clique (it names the daemon in "
        "the IMEX configuration); -1 on a node without fabric.",
        default=None,
    )
    status: Status = field(
        "status", "Whether the node's IMEX daemon is ready.", default=Status.NOT_READY
    )


class ComputeDomainStatus(Model):
    """Observed state of a ComputeDomain, written by the controller."""

    status: Status = field(
        "status",
        "Overall readiness, for people debugging; workloads should not wait on it.",
        default=Status.NOT_READY,
        required=True,
    )
    nodes: tuple[ComputeDomainNode, ...] = field(
        "nodes",
        "Nodes running an IMEX daemon of this ComputeDomain.",
        default=(),
        list_map_keys=("name",),
    )
    # Our addition, not in the incumbent's API: optional, so the incumbent's tools ignore it
    # (and its CRD prunes it after a downgrade). It exists because a printer column can only
    # show a JSONPath, not a count, and "17/18" is what an operator wants to see.
    nodes_ready: str | None = field(
        "nodesReady",
        'Ready nodes out of all nodes, as "ready/total", for display: the total is the '
        "number of entries in status.nodes, or spec.numNodes when that is larger.",
        default=None,
    )


class ComputeDomain(Model):
    """A set of nodes prepared to run one multi-node NVLink workload (one IMEX domain)."""

    KIND: ClassVar[str | None] = constants.COMPUTE_DOMAIN_KIND
    API_VERSION: ClassVar[str | None] = constants.API_VERSION

    metadata: Mapping[str, Any] = field("metadata", "", default_factory=dict)
    spec: ComputeDomainSpec | None = field(
        "spec",
        "What the ComputeDomain asks for; immutable after creation.",
        default=None,
        immutable=IMMUTABLE_SPEC_MESSAGE,
    )
    status: ComputeDomainStatus | None = field(
        "status", "Observed state, written by the controller.", default=None
    )

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        """``metadata.namespace``."""
        return str(self.metadata.get("namespace", ""))

    @property
    def uid(self) -> str:
        """``metadata.uid``: the domain ID that claims and node labels carry."""
        return str(self.metadata.get("uid", ""))


# -- ComputeDomainClique ------------------------------------------------------------------


class CliqueDaemon(Model):
    """One IMEX daemon of a ComputeDomain within one NVLink clique."""

    node_name: str = field("nodeName", "Node the daemon runs on.")
    ip_address: str = field("ipAddress", "IP address of the daemon pod.")
    clique_id: str = field("cliqueID", "NVLink clique of the node, <clusterUUID>.<cliqueID>.")
    index: int | None = field(
        "index", "Index of the daemon within the clique, unique per clique.", default=None
    )
    status: Status = field("status", "Whether the daemon is ready.", default=Status.NOT_READY)


class ComputeDomainClique(Model):
    """The IMEX daemons of one ComputeDomain in one NVLink clique.

    Named ``<computeDomainUID>.<cliqueID>``, in the driver's namespace. It has neither spec
    nor status: the daemons register themselves in the top-level ``daemons`` list.
    """

    KIND: ClassVar[str | None] = constants.CLIQUE_KIND
    API_VERSION: ClassVar[str | None] = constants.API_VERSION

    metadata: Mapping[str, Any] = field("metadata", "", default_factory=dict)
    daemons: tuple[CliqueDaemon, ...] = field(
        "daemons",
        "The daemons of this clique, one per node.",
        default=(),
        list_map_keys=("nodeName",),
    )


# -- Opaque device configs ----------------------------------------------------------------


class ChannelConfig(Model):
    """Opaque config of a channel claim (kind ComputeDomainChannelConfig)."""

    KIND: ClassVar[str | None] = constants.CHANNEL_CONFIG_KIND
    API_VERSION: ClassVar[str | None] = constants.API_VERSION

    domain_id: str = field("domainID", "UID of the ComputeDomain.", min_length=1)
    allocation_mode: AllocationMode = field(
        "allocationMode", "How many channels to inject.", default=AllocationMode.SINGLE
    )


class DaemonConfig(Model):
    """Opaque config of an IMEX daemon claim (kind ComputeDomainDaemonConfig)."""

    KIND: ClassVar[str | None] = constants.DAEMON_CONFIG_KIND
    API_VERSION: ClassVar[str | None] = constants.API_VERSION

    domain_id: str = field("domainID", "UID of the ComputeDomain.", min_length=1)


def clique_name(domain_uid: str, clique_id: str) -> str:
    """``<domain UID>.<clique ID>``: the name of a domain's ComputeDomainClique (incumbent's)."""
    return f"{domain_uid}.{clique_id}"


def parse_opaque_config(parameters: Mapping[str, Any]) -> ChannelConfig | DaemonConfig:
    """Strictly parse the ``parameters`` of an opaque config for our driver.

    Dispatches on ``apiVersion`` and ``kind``. Unknown fields, a missing or empty
    ``domainID`` and unknown enum values raise :class:`ValidationError`; the kubelet plugin
    treats that as a permanent prepare error, since retrying cannot fix the claim.
    """
    if not isinstance(parameters, Mapping):
        raise ValidationError("", f"expected an object, got {type(parameters).__name__}")
    if parameters.get("apiVersion") != constants.API_VERSION:
        raise ValidationError(
            "apiVersion",
            f"expected {constants.API_VERSION!r}, got {parameters.get('apiVersion')!r}",
        )
    kinds: tuple[type[ChannelConfig | DaemonConfig], ...] = (ChannelConfig, DaemonConfig)
    for cls in kinds:
        if parameters.get("kind") == cls.KIND:
            return cls.from_dict(parameters, strict=True)
    expected = " or ".join(repr(c.KIND) for c in kinds)
    raise ValidationError("kind", f"expected {expected}, got {parameters.get('kind')!r}")
