"""The ``FabricVerdict`` node file: what node-init tells the kubelet plugin and the IMEX agent.

node-init writes it; the kubelet plugin, the IMEX agent and ``fabric show --json`` read or
print it (``docs/node-side.md``). Its fields, its verdict values, the one rule for "usable" and
the grace through which a usable verdict outlives a fault that may pass are defined here once,
so writer and readers cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import pathlib
import threading
import time
from collections.abc import Callable
from typing import ClassVar

from computedomains import flags, nodefiles
from computedomains.api.schema import Model, ValidationError, field

log = logging.getLogger(__name__)

KIND = "FabricVerdict"


class VerdictKind(enum.StrEnum):
    """The fabric verdict of a node (the ``verdict`` field)."""

    NO_FABRIC = "no-fabric"
    HEALTHY = "healthy"
    TRANSITIONAL = "transitional"
    DEGRADED = "degraded"
    BROKEN = "broken"
    INCONSISTENT = "inconsistent"


USABLE = frozenset({VerdictKind.HEALTHY, VerdictKind.DEGRADED, VerdictKind.NO_FABRIC})
"""Verdicts under which a node serves ComputeDomain claims: with channels in its clique
(healthy, degraded: slower links still carry IMEX), or without a fabric (claims succeed with no
channel devices)."""


def usable(verdict: str) -> bool:
    """Whether a node with ``verdict`` may serve ComputeDomain claims.

    Takes the wire value, so a reader's placeholder for "no verdict yet" (or a verdict a newer
    writer invented) is simply not usable.
    """
    return verdict in USABLE


class GpuFabricEntry(Model):
    """One GPU's fabric registration as NVML reported it."""

    state: str = field("state", "nvmlGpuFabricState_t without its prefix (COMPLETED, ...).")
    status: str = field("status", "Registration result, the nvmlReturn_t name without NVML_.")
    cluster_uuid: str = field("clusterUuid", "NVLink cluster UUID; all zeros when unregistered.")
    clique_id: int = field("cliqueId", "NVLink clique ID within the cluster.")
    health_mask: int | None = field(
        "healthMask", "NVML's fabric health mask; absent when the driver has none.", default=None
    )


class GpuEntry(Model):
    """One GPU as discovery saw it through NVML."""

    index: int = field("index", "NVML index of the GPU.")
    uuid: str = field("uuid", "GPU UUID.")
    name: str = field("name", "Product name.")
    fabric: GpuFabricEntry | None = field(
        "fabric", "Fabric registration; absent when the GPU has no NVLink fabric.", default=None
    )


class FabricVerdict(Model):
    """A FabricVerdict document."""

    KIND: ClassVar[str | None] = KIND
    API_VERSION: ClassVar[str | None] = nodefiles.API_VERSION

    node: str = field("node", "The node the verdict is about.")
    verdict: VerdictKind = field("verdict", "The verdict.")
    reason: str = field(
        "reason",
        # Kept as text: a newer writer may use a reason this reader does not know yet.
        "CamelCase reason, as on the NVLinkFabricReady node condition.",
    )
    message: str = field("message", "What a human should know or do.")
    clique: str = field(
        "clique", "<clusterUUID>.<cliqueID>; empty unless healthy or degraded.", default=""
    )
    driver_version: str = field("driverVersion", "GPU driver version.", default="")
    imex_channel_count: int | None = field(
        "imexChannelCount", "IMEX channels the driver exposes; absent when unknown.", default=None
    )
    gpus: tuple[GpuEntry, ...] = field(
        "gpus", "Every GPU; absent when discovery failed.", default=()
    )
    observed_at: str = field(
        "observedAt", "RFC 3339 UTC time of the discovery the verdict rests on.", default=""
    )

    @property
    def usable(self) -> bool:
        """See :func:`usable`."""
        return usable(self.verdict)


def write(path: pathlib.Path, verdict: FabricVerdict) -> None:
    """Replace the verdict file atomically."""
    nodefiles.write_json(path, verdict.to_dict())


def read(path: pathlib.Path) -> FabricVerdict | None:
    """The verdict at ``path``; None when absent, :class:`nodefiles.CorruptNodeFile` if bad."""
    document = nodefiles.read_json(path, kind=KIND)
    if document is None:
        return None
    try:
        # Not strict: fields a newer writer added are ignored, as for objects from the API.
        return FabricVerdict.from_dict(document, strict=False)
    except ValidationError as exc:
        raise nodefiles.CorruptNodeFile(path, str(exc)) from None


@dataclasses.dataclass(frozen=True)
class NodeFabric:
    """The node's verdict as the node's components act on it (plugin, IMEX agent)."""

    verdict: str
    """A :class:`VerdictKind` value, or ``unknown`` while there is none."""
    reason: str
    message: str
    clique: str
    channel_count: int

    @property
    def usable(self) -> bool:
        """Whether channels can be handed out (with or without an NVLink fabric)."""
        return usable(self.verdict)

    @property
    def has_fabric(self) -> bool:
        """Whether the node is in a clique (IMEX channels exist and IMEX must be ready)."""
        return bool(self.clique)

    @property
    def why_no_clique(self) -> str:
        """Why the node is in no clique, in words ("" when it is in one)."""
        if self.clique:
            return ""
        if self.reason in (NO_VERDICT.reason, UNREADABLE_REASON):
            return self.message
        return f"fabric verdict {self.verdict}: {self.message}"


NO_VERDICT = NodeFabric(
    "unknown", "NoFabricVerdict", "node-init has written no fabric verdict yet", "", 0
)
UNREADABLE_REASON = "FabricVerdictUnreadable"


def read_node(path: pathlib.Path) -> NodeFabric:
    """The node's verdict now; :data:`NO_VERDICT` (unusable) while none or a corrupt one."""
    try:
        verdict = read(path)
    except nodefiles.CorruptNodeFile as exc:
        return dataclasses.replace(
            NO_VERDICT,
            reason=UNREADABLE_REASON,
            message=f"the fabric verdict is unreadable ({exc.reason})",
        )
    if verdict is None:
        return NO_VERDICT
    return NodeFabric(
        verdict=verdict.verdict.value,
        reason=verdict.reason,
        message=verdict.message,
        clique=verdict.clique,
        channel_count=verdict.imex_channel_count or 0,
    )


# -- The fault grace ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Grace:
    """How long a usable verdict outlives a fault that may pass; the first bound reached ends it.

    Such faults: an NVML error, a registration in progress again, an unreadable file. Taking
    a node's verdict away stops IMEX under the job running there, which costs far more than
    serving a few minutes on a fabric that is really gone (its IMEX links fail on their own).

    A flag group (``flags.group``) of every component that holds a verdict through a fault:
    one name and one bound each, from the command line or the environment alike.
    """

    checks: int = flags.option(
        "--fault-grace-checks",
        default="3",
        type=flags.at_least_one,
        help="failed fabric checks in a row after which a usable verdict is given up (>= 1)",
    )
    """Consecutive failed checks that make a fault sustained. At node-init's default re-check
    interval (60 s) three ride out a failed NVML call or a fabric-manager failover (tens of
    seconds) and give up on the node about two minutes after the fault began."""
    seconds: float = flags.option(
        "--fault-grace-seconds",
        default="180",
        type=flags.not_negative,
        help="seconds of failed fabric checks after which a usable verdict is given up",
    )
    """Seconds after the first failed check that make a fault sustained: bounds the grace
    however rarely checks run (a re-check interval raised to ten minutes must not keep a dead
    fabric's verdict for half an hour). Above three default intervals, so by default the
    count decides."""

    def sustained(self, *, failures: int, elapsed: float) -> bool:
        """Whether a fault seen on ``failures`` checks in a row over ``elapsed`` s is past it."""
        return failures >= self.checks or elapsed >= self.seconds


# -- Reading through a fault -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FabricHold:
    """What a reader (the plugin, the IMEX agent) remembers between two reads of the verdict."""

    kept: NodeFabric | None = None
    """The last usable verdict read: what an unreadable file is taken to say, for a while."""
    unreadable_since: float | None = None
    """Monotonic time of the first of the current run of unreadable reads."""


def hold(
    state: FabricHold, read: NodeFabric, *, now: float, grace: Grace
) -> tuple[NodeFabric, FabricHold]:
    """The verdict to act on after reading ``read``, and what to remember for the next read.

    An unreadable file (a torn copy by hand, a full disk, a verdict a newer node-init wrote)
    says nothing about the fabric, and taking the node's channels away, or its clique from the
    IMEX agent, would stop IMEX under a running job: the last usable verdict stands for
    ``grace.seconds``. Only the time bound applies, since readers read as often as they like
    (the plugin on every prepare), so a count of reads says nothing about how long a fault
    lasted. Anything readable is taken as it is, an unusable verdict included: node-init has
    ridden out the fault it saw before writing that.
    """
    if read.reason != UNREADABLE_REASON:
        return read, FabricHold(kept=read if read.usable else None)
    since = now if state.unreadable_since is None else state.unreadable_since
    if state.kept is not None and now - since < grace.seconds:
        return state.kept, FabricHold(kept=state.kept, unreadable_since=since)
    return read, FabricHold(unreadable_since=since)


class FabricTracker:
    """Reads the verdict file through :func:`hold`; one per component, shared by its readers."""

    def __init__(
        self,
        path: pathlib.Path,
        *,
        grace: Grace,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._grace = grace
        self._clock = clock
        self._lock = threading.Lock()
        self._state = FabricHold()

    def read(self) -> NodeFabric:
        """The verdict to act on now."""
        # Read under the lock too: two readers must not apply their reads out of order.
        with self._lock:
            read = read_node(self._path)
            before = self._state
            current, self._state = hold(before, read, now=self._clock(), grace=self._grace)
        if current is not read and before.unreadable_since is None:
            log.warning(
                "keeping the last usable fabric verdict for up to %gs: %s",
                self._grace.seconds,
                read.message,
            )
        return current
