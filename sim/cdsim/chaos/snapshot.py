"""What the chaos run sees of the cluster at one moment (pure dataclasses).

:mod:`observe` fills a :class:`Snapshot` from the API server and the nodes' host trees;
:mod:`invariants` judges snapshots. Only what an invariant needs is kept, in plain values, so
a test writes a snapshot by hand in a few lines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Member:
    """A node in a ComputeDomain's ``status.nodes``."""

    node: str
    ready: bool
    index: int | None = None
    clique: str = ""


@dataclasses.dataclass(frozen=True)
class Domain:
    """A ComputeDomain."""

    namespace: str
    name: str
    uid: str
    ready: bool
    """``status.status`` is Ready."""
    members: tuple[Member, ...] = ()
    deleting: bool = False
    """It has a ``deletionTimestamp`` (its finalizer still holds it)."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True)
class Pod:
    """A workload pod of the run."""

    namespace: str
    name: str
    uid: str
    domain: str
    """The name of its ComputeDomain (same namespace)."""
    node: str
    """Where it is bound; "" while unscheduled."""
    phase: str
    claims: tuple[str, ...] = ()
    """Names of its ResourceClaims (``status.resourceClaimStatuses``)."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def domain_key(self) -> str:
        """``namespace/domain``."""
        return f"{self.namespace}/{self.domain}"

    @property
    def running(self) -> bool:
        """Phase Running."""
        return self.phase == "Running"


@dataclasses.dataclass(frozen=True)
class Claim:
    """A ResourceClaim for a ComputeDomain channel (any namespace)."""

    namespace: str
    name: str
    uid: str
    domain_uid: str
    node: str = ""
    """The node its channel devices are allocated on; "" while unallocated."""
    devices: tuple[str, ...] = ()
    reserved_for: tuple[str, ...] = ()
    """UIDs of the pods it is reserved for."""


@dataclasses.dataclass(frozen=True)
class Daemon:
    """One entry of a clique object's ``daemons``."""

    node: str
    index: int | None
    ready: bool


@dataclasses.dataclass(frozen=True)
class Clique:
    """A ComputeDomainClique: one domain's IMEX daemons in one NVLink clique."""

    name: str
    domain_uid: str
    clique: str
    daemons: tuple[Daemon, ...] = ()
    members: tuple[str, ...] | None = None
    """The membership record (``computedomains.io/members``); None without one."""

    def is_member(self, node: str) -> bool:
        """Whether the record names ``node`` (without a record: whether it is listed)."""
        if self.members is not None:
            return node in self.members
        return any(d.node == node for d in self.daemons)

    def index_of(self, node: str) -> int | None:
        """``node``'s slot here, if it has one."""
        return next((d.index for d in self.daemons if d.node == node), None)


@dataclasses.dataclass(frozen=True)
class Template:
    """A ResourceClaimTemplate of a run's namespace and the domain that owns it."""

    namespace: str
    name: str
    owner_uid: str


@dataclasses.dataclass(frozen=True)
class Node:
    """A simulated node as the API shows it."""

    name: str
    ready: bool
    fabric_ready: bool = True
    """Its NVLinkFabricReady condition is True."""
    domain_label: str = ""
    """Its ``resource.nvidia.com/computeDomain`` label."""
    taints: tuple[str, ...] = ()
    """``key=value:effect`` of its node taints."""
    held_for: tuple[str, ...] = ()
    """Domain UIDs its ResourceSlice's channel devices name (hold taints, holder attribute)."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One claim in a node's plugin checkpoint."""

    claim_uid: str
    domain_uid: str
    state: str
    """``PrepareStarted``, ``PrepareCompleted`` or ``PrepareAborted``."""
    channel: bool = True
    """A channel claim (not the IMEX agent's daemon claim)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """One claim's CDI spec on a node."""

    claim_uid: str
    domain_uid: str


@dataclasses.dataclass(frozen=True)
class NodeFiles:
    """What a node's host tree holds of ours."""

    node: str
    specs: tuple[Spec, ...] = ()
    checkpoint: tuple[Entry, ...] | None = ()
    """None while the checkpoint cannot be read (missing, being rewritten, damaged)."""
    imex_running: bool = False
    """An nvidia-imex process runs for the node."""
    imex_domain: str = ""
    """The domain UID the IMEX status file names."""
    imex_state: str = ""
    """Its ``state``: READY, NOT_READY, FAILED, STOPPED; "" without a file."""

    @property
    def imex_ready_for(self) -> str:
        """The domain IMEX runs READY for ("" when it does not)."""
        ready = self.imex_running and self.imex_state == "READY"
        return self.imex_domain if ready else ""


@dataclasses.dataclass(frozen=True)
class Container:
    """One container of a chart pod."""

    name: str
    ready: bool
    restarts: int = 0
    waiting: str = ""
    """The reason it waits (``CrashLoopBackOff``), if it does."""


@dataclasses.dataclass(frozen=True)
class Component:
    """A chart pod (plugin, agent, controller, webhook)."""

    name: str
    component: str
    """Its ``app.kubernetes.io/component``."""
    node: str
    ready: bool
    containers: tuple[Container, ...] = ()
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything the invariants look at, seen at ``at`` seconds into the run."""

    at: float
    domains: tuple[Domain, ...] = ()
    pods: tuple[Pod, ...] = ()
    claims: tuple[Claim, ...] = ()
    cliques: tuple[Clique, ...] = ()
    templates: tuple[Template, ...] = ()
    nodes: tuple[Node, ...] = ()
    files: tuple[NodeFiles, ...] = ()
    components: tuple[Component, ...] = ()
    leader: str = ""
    """The controller pod holding the lease ("" when none does)."""

    def domain(self, key: str) -> Domain | None:
        """The domain ``namespace/name``."""
        return next((d for d in self.domains if d.key == key), None)

    def pod(self, key: str) -> Pod | None:
        """The pod ``namespace/name``."""
        return next((p for p in self.pods if p.key == key), None)

    def pods_of(self, domain_key: str) -> list[Pod]:
        """The pods of the domain ``namespace/name``."""
        return [p for p in self.pods if p.domain_key == domain_key]

    def claims_of(self, pod: Pod) -> list[Claim]:
        """The pod's channel claims."""
        names = set(pod.claims)
        return [c for c in self.claims if c.namespace == pod.namespace and c.name in names]

    def cliques_of(self, domain_uid: str) -> list[Clique]:
        """The clique objects of a domain."""
        return [c for c in self.cliques if c.domain_uid == domain_uid]

    def node(self, name: str) -> Node | None:
        """The node ``name``."""
        return next((n for n in self.nodes if n.name == name), None)

    def files_of(self, node: str) -> NodeFiles | None:
        """What ``node``'s host tree holds."""
        return next((f for f in self.files if f.node == node), None)

    def busy_nodes(self) -> list[str]:
        """Nodes running a workload pod."""
        return sorted({p.node for p in self.pods if p.running and p.node})


def restarts(components: Iterable[Component]) -> dict[str, int]:
    """``pod/container`` → restart count."""
    return {f"{c.name}/{k.name}": k.restarts for c in components for k in c.containers}
