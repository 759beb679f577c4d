"""Typed ComputeDomain API objects: v1beta1 (the incumbent driver's) and v1beta2 (storage).

``ComputeDomain`` and ``ComputeDomainClique`` are the v1beta1 custom resources, unchanged so
that incumbent manifests keep working; ``ComputeDomainV1Beta2`` and
``ComputeDomainCliqueV1Beta2`` are the storage version every component reads and writes
(:mod:`computedomains.api.conversion` maps between the two). ``ChannelConfig`` and
``DaemonConfig`` are the opaque device configs the controller writes into
ResourceClaimTemplates and the kubelet plugin reads back on prepare (they stay v1beta1). The
field declarations here are also the source of the CRD schemas (:mod:`computedomains.api.crds`),
so a default, an enum or a required field cannot differ between the two.

Compatibility notes, where the choices are not obvious:

- ``spec`` itself is optional at the top level, as in the incumbent's CRD: requiring it now
  would make any stored object without one impossible to update, even to drop a finalizer.
- ``index`` of a node has no default (``None`` when absent); ``numNodes`` and
  ``allocationMode`` have defaults, so objects written before those fields existed parse.
- v1beta2 has no ``numNodes``; a v1beta1 value survives in the annotation
  ``computedomains.io/num-nodes`` (:attr:`ComputeDomainV1Beta2.num_nodes` reads it).
- v1beta2's ``status.status`` is Ready exactly when its Ready condition is True, and a
  domain nobody has joined is not Ready (v1beta1 read "Ready" for it).
"""
# size: the CRDs' every field in both versions, declared once (the CRD manifests come from it)

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
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


class _Named:
    """Accessors of ``metadata`` shared by the top-level kinds."""

    metadata: Mapping[str, Any]

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


class ComputeDomain(_Named, Model):
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


class ComputeDomainCliqueV1Beta2(ComputeDomainClique):
    """The IMEX daemons of one ComputeDomain in one NVLink clique.

    v1beta2 has the same schema as v1beta1 (the CRD converts it by swapping ``apiVersion``).
    """

    API_VERSION: ClassVar[str | None] = constants.API_VERSION_V1BETA2


def parse_clique(obj: Mapping[str, Any], *, strict: bool) -> ComputeDomainClique:
    """A clique object at either version (they share one schema).

    A watch that fell back to v1beta1 (a CRD rolled back to 0.1.x, an OnDelete agent of this
    release still running) reads it too.
    """
    if obj.get("apiVersion") == ComputeDomainClique.API_VERSION:
        return ComputeDomainClique.from_dict(obj, strict=strict)
    return ComputeDomainCliqueV1Beta2.from_dict(obj, strict=strict)


# -- ComputeDomain v1beta2 ----------------------------------------------------------------

NUM_NODES_FORMAT = re.compile(r"[0-9]{1,19}")
"""The ``computedomains.io/num-nodes`` annotation: a decimal count."""
NUM_NODES_MAX = 2**63 - 1
"""The largest v1beta1 ``spec.numNodes`` (an int64): every value it can hold round-trips."""


def parse_num_nodes(text: object) -> int:
    """The count a ``computedomains.io/num-nodes`` annotation holds; ValueError if none."""
    if not isinstance(text, str) or NUM_NODES_FORMAT.fullmatch(text) is None:
        raise ValueError(f"expected a decimal number of nodes, got {text!r}")
    count = int(text)
    if count > NUM_NODES_MAX:
        raise ValueError(f"expected a number of nodes up to {NUM_NODES_MAX}, got {text!r}")
    return count


class CliquePlacement(enum.StrEnum):
    """Whether a ComputeDomain's pods must, should or need not share one NVLink clique."""

    REQUIRED = "Required"
    """Pods schedule only into the clique the domain's first pods landed in."""
    PREFERRED = "Preferred"
    """The scheduler prefers that clique, and uses another when it is full."""
    NONE = "None"
    """No clique affinity is added."""


class Placement(Model):
    """Where the pods of a ComputeDomain are placed, added to them at admission."""

    clique: CliquePlacement = field(
        "clique",
        "Required: every pod of the domain lands in one NVLink clique (a pod affinity on the "
        "node's clique label, added at admission); Preferred: the same as a preference; None: "
        "no affinity is added.",
        default=CliquePlacement.NONE,
    )


NUM_NODES_REFUSED = (
    "numNodes is a v1beta1 field: v1beta2 keeps a v1beta1 object's value in the annotation "
    f"{constants.NUM_NODES_ANNOTATION}, and a ComputeDomain's spec cannot change once created"
)


class ComputeDomainSpecV1Beta2(Model):
    """What a ComputeDomain asks for; fixed once the object exists."""

    channel: ChannelSpec = field("channel", "The IMEX channel workload pods claim.")
    num_nodes: int | None = field(
        "numNodes",
        "Not part of v1beta2 (any value is refused): the v1beta1 field, named here so that a "
        "write that sets it through v1beta2 is refused instead of dropped.",
        default=None,
        refused=NUM_NODES_REFUSED,
    )
    placement: Placement | None = field(
        "placement", "Where the domain's pods are placed; absent means clique None.", default=None
    )


class ConditionStatus(enum.StrEnum):
    """The status of a condition (metav1.Condition)."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    """One aspect of a ComputeDomain's state (the metav1.Condition shape)."""

    type: str = field("type", "Ready, Formed or Degraded.", min_length=1)
    status: ConditionStatus = field("status", "True, False or Unknown.")
    reason: str = field("reason", "Why the condition has its status, in CamelCase.", min_length=1)
    message: str = field(
        "message", "What the reason means for this domain, in words.", default="", required=True
    )
    observed_generation: int | None = field(
        "observedGeneration",
        "metadata.generation of the ComputeDomain the condition was computed from.",
        default=None,
        minimum=0,
    )
    last_transition_time: str = field(
        "lastTransitionTime", "When the status last changed (RFC 3339).", min_length=1
    )


class CliqueSummary(Model):
    """The members of a ComputeDomain in one NVLink clique."""

    id: str = field("id", "The clique, <clusterUUID>.<cliqueID>.")
    nodes: int = field("nodes", "Member nodes in the clique.", minimum=0)
    ready_nodes: int = field("readyNodes", "Of those, nodes whose IMEX daemon is ready.", minimum=0)


class ComputeDomainStatusV1Beta2(ComputeDomainStatus):
    """Observed state of a ComputeDomain, written by the controller."""

    conditions: tuple[Condition, ...] = field(
        "conditions",
        "Ready (every member ready, at least one member and spec.numNodes of them), Formed "
        "(every member's IMEX daemon ready) and Degraded (members that were ready are not, or a "
        "domain with placement clique Required has members in several cliques).",
        default=(),
        list_map_keys=("type",),
    )
    cliques: tuple[CliqueSummary, ...] = field(
        "cliques",
        "Members and ready members per NVLink clique (members without a fabric are left out).",
        default=(),
        list_map_keys=("id",),
    )

    def condition(self, type_: str) -> Condition | None:
        """The condition of type ``type_``, if present."""
        return next((c for c in self.conditions if c.type == type_), None)


class ComputeDomainV1Beta2(_Named, Model):
    """A set of nodes prepared to run one multi-node NVLink workload (one IMEX domain)."""

    KIND: ClassVar[str | None] = constants.COMPUTE_DOMAIN_KIND
    API_VERSION: ClassVar[str | None] = constants.API_VERSION_V1BETA2

    metadata: Mapping[str, Any] = field("metadata", "", default_factory=dict)
    spec: ComputeDomainSpecV1Beta2 | None = field(
        "spec",
        "What the ComputeDomain asks for; immutable after creation.",
        default=None,
        immutable=IMMUTABLE_SPEC_MESSAGE,
    )
    status: ComputeDomainStatusV1Beta2 | None = field(
        "status", "Observed state, written by the controller.", default=None
    )

    @property
    def generation(self) -> int:
        """``metadata.generation`` (0 when absent)."""
        value = self.metadata.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def num_nodes(self) -> int:
        """The v1beta1 ``spec.numNodes``, from its annotation; 0 when absent or unreadable."""
        annotations = self.metadata.get("annotations") or {}
        try:
            return parse_num_nodes(annotations.get(constants.NUM_NODES_ANNOTATION, "0"))
        except ValueError:
            return 0

    @property
    def clique_placement(self) -> CliquePlacement:
        """``spec.placement.clique`` (None when unset)."""
        placement = self.spec.placement if self.spec is not None else None
        return placement.clique if placement is not None else CliquePlacement.NONE


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


def clique_members(obj: Mapping[str, Any]) -> frozenset[str] | None:
    """The members a clique object names (``CLIQUE_MEMBERS_ANNOTATION``); None when unnamed."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(constants.CLIQUE_MEMBERS_ANNOTATION)
    if not isinstance(value, str):
        return None
    return frozenset(n for n in value.split(",") if n)


def clique_members_value(members: Iterable[str]) -> str:
    """The annotation value naming ``members`` (sorted, so equal sets write equal text)."""
    return ",".join(sorted(members))


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
