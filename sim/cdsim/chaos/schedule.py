"""The timeline of a chaos run, drawn from a seed and a duration (pure).

Two streams come out of one ``random.Random(seed)``, each from its own generator seeded by the
first, so a change to how faults are drawn leaves the workload of a seed as it was, and the
other way round:

- **Workload**: ComputeDomains created (some several at once, so that they place at once),
  scaled and deleted, across ``tenants`` namespaces. A domain is *spread* (one pod per node:
  a multi-node domain, 2 to ``max_spread`` pods) or *packed* (every pod on one node: a
  single-node domain, 1 to ``max_packed`` pods), with clique placement Required, Preferred or
  None. The nodes domains use, counting those of a deleted domain for ``release_delay``
  seconds after, stay within ``capacity`` of the cluster's nodes, so every domain can be
  placed: with half the nodes free, one rack always has room for the largest domain even
  with a node or two out. The last domain left is never deleted (the faults need pods to
  hit). Workload changes stop at ``workload_end`` of the run, so the last domains have formed
  before it ends.
- **Faults**: every :class:`FaultKind` once, spread over the run in a shuffled order, then more
  at random gaps of ``fault_gap``. A fault is instant (a SIGKILL) or lasts a drawn while and is
  undone then (:data:`LASTING`); every one is undone by the end of the run. The API server
  restart and the etcd pause never overlap (each keeps ``cp_margin`` seconds from the other):
  an API server cannot start while etcd is frozen, and the run would learn nothing from it.

Which node or replica a fault hits is known only while the run plays: a fault carries a
``pick`` in [0, 1) that chooses among the candidates found then (:func:`choose`), so a seed
replays the same choices wherever the cluster is in the same state.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import re
import types
from collections.abc import Mapping, Sequence
from typing import TypeAlias


class FaultKind(enum.StrEnum):
    """What a fault does."""

    KILL_PLUGIN = "kill-plugin"
    """SIGKILL a node's kubelet plugin."""
    KILL_AGENT = "kill-agent"
    """SIGKILL a node's IMEX agent (its nvidia-imex dies with it)."""
    KILL_CONTROLLER_LEADER = "kill-controller-leader"
    """SIGKILL the controller replica that holds the lease."""
    KILL_CONTROLLER_STANDBY = "kill-controller-standby"
    """SIGKILL a controller replica that does not hold the lease."""
    KILL_WEBHOOK = "kill-webhook"
    """SIGKILL a webhook replica."""
    KILL_IMEX = "kill-imex"
    """SIGKILL a node's (fake) nvidia-imex; its agent starts it again."""
    HANG_IMEX = "hang-imex"
    """A node's nvidia-imex answers nothing (its ``hang`` fault) until undone."""
    RESTART_APISERVER = "restart-apiserver"
    """Stop kube-apiserver, start it again as it was after a few seconds."""
    PAUSE_ETCD = "pause-etcd"
    """SIGSTOP etcd, SIGCONT it after a few seconds."""
    DEGRADE_FABRIC = "degrade-fabric"
    """A node's NVML reports its fabric failed or degraded until undone (healthy again)."""
    NODE_NOT_READY = "node-not-ready"
    """A node reports NotReady until undone."""
    CORRUPT_CHECKPOINT = "corrupt-checkpoint"
    """A node's plugin is frozen, its checkpoint damaged, the plugin SIGKILLed."""


NODE_FAULTS = frozenset(
    {
        FaultKind.KILL_PLUGIN,
        FaultKind.KILL_AGENT,
        FaultKind.KILL_IMEX,
        FaultKind.HANG_IMEX,
        FaultKind.DEGRADE_FABRIC,
        FaultKind.NODE_NOT_READY,
        FaultKind.CORRUPT_CHECKPOINT,
    }
)
"""Faults of one node, which the run picks among the nodes that run workload pods."""
CONTROL_PLANE_FAULTS = frozenset({FaultKind.RESTART_APISERVER, FaultKind.PAUSE_ETCD})
LASTING: Mapping[FaultKind, tuple[float, float]] = types.MappingProxyType(
    {
        FaultKind.HANG_IMEX: (10.0, 40.0),
        FaultKind.RESTART_APISERVER: (1.0, 5.0),
        FaultKind.PAUSE_ETCD: (2.0, 10.0),
        FaultKind.DEGRADE_FABRIC: (20.0, 60.0),
        FaultKind.NODE_NOT_READY: (15.0, 60.0),
    }
)
"""Seconds a lasting fault lasts, drawn between the two (at most a quarter of the run, never
below the first); the API server's are the seconds it stays down. The rest are instant. A
fabric fault of 20 s outlasts the simulated profile's grace (three failed checks, 5 s apart),
so a failed fabric does take the node out; a NotReady node never reaches the 300 s after which
its pods would be evicted."""
VARIANTS: Mapping[FaultKind, tuple[str, ...]] = types.MappingProxyType(
    {
        # cdsim.topology.FabricProfile values: failed takes the node out, degraded keeps it.
        FaultKind.DEGRADE_FABRIC: ("failed", "degraded"),
        # cdsim.nodefaults.CHECKPOINT_DAMAGE.
        FaultKind.CORRUPT_CHECKPOINT: ("corrupt", "newer-version"),
    }
)
"""The ways of a fault kind, one drawn per fault."""
CLIQUE_PLACEMENTS = ("Required", "Preferred", "None")
"""``spec.placement.clique`` values a domain is created with."""
MIN_DURATION = 60.0
"""Shorter runs cannot fit one fault of each kind with its recovery."""


class Layout(enum.StrEnum):
    """How a domain's pods share nodes."""

    SPREAD = "spread"
    """One pod per node: a multi-node domain."""
    PACKED = "packed"
    """Every pod on one node: a single-node domain."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a domain runs."""

    pods: int
    layout: Layout
    clique: str
    """Its ``spec.placement.clique``."""

    @property
    def nodes(self) -> int:
        """The nodes its pods take."""
        return self.pods if self.layout is Layout.SPREAD else 1

    def scaled(self, pods: int) -> Shape:
        """The same domain with ``pods`` pods."""
        return dataclasses.replace(self, pods=pods)


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault of the timeline."""

    number: int
    """1, 2, ... in the order of ``at``: names the fault in the output."""
    kind: FaultKind
    at: float
    """Seconds after the run's start."""
    lasts: float
    """Seconds until it is undone; 0 for an instant fault."""
    pick: float
    """In [0, 1): which of the candidates found while the run plays it (:func:`choose`)."""
    variant: str = ""
    """One of :data:`VARIANTS` for its kind, else empty."""

    @property
    def ends(self) -> float:
        """When it is undone (``at`` for an instant fault)."""
        return self.at + self.lasts

    @property
    def label(self) -> str:
        """``#3 degrade-fabric (failed)``."""
        return f"#{self.number} {self.kind}" + (f" ({self.variant})" if self.variant else "")


@dataclasses.dataclass(frozen=True)
class Inject:
    """Do ``fault``."""

    at: float
    fault: Fault


@dataclasses.dataclass(frozen=True)
class Undo:
    """Undo a lasting ``fault``."""

    at: float
    fault: Fault


@dataclasses.dataclass(frozen=True)
class Create:
    """Create domain ``domain`` in tenant ``tenant`` with its pods."""

    at: float
    domain: str
    tenant: int
    shape: Shape


@dataclasses.dataclass(frozen=True)
class Scale:
    """Give a domain ``pods`` pods (new ones added, the newest removed)."""

    at: float
    domain: str
    tenant: int
    pods: int


@dataclasses.dataclass(frozen=True)
class Delete:
    """Delete a domain and its pods: the pods first, or the domain first."""

    at: float
    domain: str
    tenant: int
    pods_first: bool


Step: TypeAlias = Inject | Undo | Create | Scale | Delete


@dataclasses.dataclass(frozen=True)
class ClusterShape:
    """What the schedule needs to know of the cluster: its NVLink nodes and racks."""

    nodes: int
    racks: int

    @property
    def nodes_per_rack(self) -> int:
        """Nodes in each rack."""
        return self.nodes // max(1, self.racks)


@dataclasses.dataclass(frozen=True)
class Settings:
    """How busy a run is; the defaults suit two racks of 18 nodes."""

    tenants: int = 3
    capacity: float = 0.5
    """Fraction of the nodes that domains may hold at once."""
    max_spread: int = 6
    max_packed: int = 3
    workload_gap: tuple[float, float] = (6.0, 20.0)
    """Seconds between workload changes."""
    burst: int = 3
    """At most this many domains created at once."""
    burst_chance: float = 0.3
    fault_gap: tuple[float, float] = (15.0, 45.0)
    """Seconds between faults after the first one of each kind."""
    release_delay: float = 60.0
    """Seconds a deleted domain's (or a removed pod's) node still counts as taken."""
    workload_end: float = 0.85
    cp_margin: float = 10.0


SHORT_RUN = 300.0
"""A run shorter than this changes its workload more often (:func:`settings_for`)."""


def settings_for(duration: float) -> Settings:
    """The settings a run of ``duration`` seconds plays with, unless told otherwise.

    A short run (``make test``'s) changes its workload every 4-10 s instead of 6-20 s, so that it
    still creates, scales and deletes in every tenant. Chosen by the duration alone, so
    ``make chaos SEED=... DURATION=...`` replays it.
    """
    if duration < SHORT_RUN:
        return Settings(workload_gap=(4.0, 10.0))
    return Settings()


@dataclasses.dataclass(frozen=True)
class Timeline:
    """A whole run: every step in order, and the faults among them."""

    seed: int
    duration: float
    steps: tuple[Step, ...]
    faults: tuple[Fault, ...]

    def fault_counts(self) -> dict[str, int]:
        """Faults by kind (every kind, zero included)."""
        counts = {kind.value: 0 for kind in FaultKind}
        for fault in self.faults:
            counts[fault.kind.value] += 1
        return counts

    def workload(self) -> list[Create | Scale | Delete]:
        """The workload steps, in order."""
        return [s for s in self.steps if isinstance(s, Create | Scale | Delete)]


def build(
    seed: int, duration: float, cluster: ClusterShape, settings: Settings | None = None
) -> Timeline:
    """The timeline of a run of ``duration`` seconds from ``seed``; the same for the same input."""
    if duration < MIN_DURATION:
        raise ValueError(f"a chaos run needs at least {MIN_DURATION:g}s, got {duration:g}s")
    settings = settings or settings_for(duration)
    # Replayable draws, not secrets: the seed must give the same run again.
    master = random.Random(seed)  # noqa: S311
    workload_rng = random.Random(master.getrandbits(64))  # noqa: S311
    fault_rng = random.Random(master.getrandbits(64))  # noqa: S311
    steps: list[Step] = list(_workload(workload_rng, duration, cluster, settings))
    faults = _faults(fault_rng, duration, settings)
    for fault in faults:
        steps.append(Inject(fault.at, fault))
        if fault.lasts > 0:
            steps.append(Undo(fault.ends, fault))
    steps.sort(key=_order)
    return Timeline(seed=seed, duration=duration, steps=tuple(steps), faults=tuple(faults))


_RANKS = {Undo: 0, Delete: 1, Scale: 2, Create: 3, Inject: 4}
"""At one moment: undo first (a node comes back), then the workload, then new faults."""


def _order(step: Step) -> tuple[float, int, str]:
    tie = str(step.fault.number) if isinstance(step, Inject | Undo) else step.domain
    return (step.at, _RANKS[type(step)], tie)


# -- workload -------------------------------------------------------------------------------


@dataclasses.dataclass
class _Book:
    """The workload drawn so far: live domains, and nodes still being released."""

    budget: int
    live: dict[str, tuple[int, Shape]] = dataclasses.field(default_factory=dict)
    releasing: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    created: int = 0

    def free(self, at: float) -> int:
        held = sum(shape.nodes for _, shape in self.live.values())
        held += sum(nodes for until, nodes in self.releasing if until > at)
        return self.budget - held


def _workload(
    rng: random.Random, duration: float, cluster: ClusterShape, settings: Settings
) -> list[Create | Scale | Delete]:
    book = _Book(budget=max(2, int(cluster.nodes * settings.capacity)))
    spread_limit = min(settings.max_spread, max(2, cluster.nodes_per_rack))
    steps: list[Create | Scale | Delete] = []
    end = duration * settings.workload_end
    # Domains at once from the start, so that the first faults find pods to hit.
    at = 1.0
    steps += _create_burst(
        rng, at, book, settings, spread_limit=spread_limit, count=rng.randint(2, settings.burst)
    )
    at += rng.uniform(*settings.workload_gap)
    while at < end:
        roll = rng.random()
        free = book.free(at)
        if not book.live or (free >= 1 and roll < 0.4):
            count = rng.randint(2, settings.burst) if rng.random() < settings.burst_chance else 1
            steps += _create_burst(rng, at, book, settings, spread_limit=spread_limit, count=count)
        elif roll < 0.7 or len(book.live) < 2:
            # The last domain is not deleted: the faults need pods to hit.
            steps += _scale(rng, at, book, settings, spread_limit)
        else:
            steps.append(_delete(rng, at, book, settings))
        at += rng.uniform(*settings.workload_gap)
    return steps


def _create_burst(
    rng: random.Random,
    at: float,
    book: _Book,
    settings: Settings,
    *,
    spread_limit: int,
    count: int,
) -> list[Create]:
    made = []
    for _ in range(count):
        free = book.free(at)
        if free < 1:
            break
        if free >= 2 and rng.random() < 0.6:
            shape = Shape(rng.randint(2, min(spread_limit, free)), Layout.SPREAD, "")
        else:
            shape = Shape(rng.randint(1, settings.max_packed), Layout.PACKED, "")
        shape = dataclasses.replace(shape, clique=rng.choice(CLIQUE_PLACEMENTS))
        name = f"d{book.created:03d}"
        book.created += 1
        tenant = rng.randrange(settings.tenants)
        book.live[name] = (tenant, shape)
        made.append(Create(at, name, tenant, shape))
    return made


def _scale(
    rng: random.Random, at: float, book: _Book, settings: Settings, spread_limit: int
) -> list[Scale]:
    name = rng.choice(sorted(book.live))
    tenant, shape = book.live[name]
    low, high = (2, spread_limit) if shape.layout is Layout.SPREAD else (1, settings.max_packed)
    grows = shape.layout is not Layout.SPREAD or book.free(at) >= 1
    options = [p for p in (shape.pods - 1, shape.pods + 1) if low <= p <= high]
    options = [p for p in options if p < shape.pods or grows]
    if not options:
        return []
    pods = rng.choice(options)
    if shape.layout is Layout.SPREAD and pods < shape.pods:
        book.releasing.append((at + settings.release_delay, shape.pods - pods))
    book.live[name] = (tenant, shape.scaled(pods))
    return [Scale(at, name, tenant, pods)]


def _delete(rng: random.Random, at: float, book: _Book, settings: Settings) -> Delete:
    name = rng.choice(sorted(book.live))
    tenant, shape = book.live.pop(name)
    book.releasing.append((at + settings.release_delay, shape.nodes))
    return Delete(at, name, tenant, pods_first=rng.random() < 0.5)


# -- faults ---------------------------------------------------------------------------------


def _lasting(rng: random.Random, kind: FaultKind, duration: float) -> float:
    if kind not in LASTING:
        return 0.0
    low, high = LASTING[kind]
    return round(rng.uniform(low, max(low, min(high, duration / 4))), 1)


def _draw(rng: random.Random, kind: FaultKind, at: float, duration: float) -> Fault:
    lasts = _lasting(rng, kind, duration)
    pick = rng.random()
    variant = rng.choice(VARIANTS[kind]) if kind in VARIANTS else ""
    return Fault(0, kind, round(at, 1), lasts, pick, variant)


def _faults(rng: random.Random, duration: float, settings: Settings) -> list[Fault]:
    start = max(10.0, min(60.0, duration / 10))
    span = duration - start
    kinds = list(FaultKind)
    rng.shuffle(kinds)
    placed: list[Fault] = []
    for index, kind in enumerate(kinds):
        fault = _draw(rng, kind, start + span * (index + rng.random()) / len(kinds), duration)
        fault = dataclasses.replace(fault, at=min(fault.at, duration - fault.lasts))
        placed.append(_moved_clear(fault, placed, settings.cp_margin, start, duration))
    at = start + rng.uniform(*settings.fault_gap)
    while at < duration:
        fault = _draw(rng, rng.choice(kinds), at, duration)
        # An extra fault is not moved: one that would overlap is left out.
        if fault.ends <= duration and _clear(fault, fault.at, placed, settings.cp_margin):
            placed.append(fault)
        at += rng.uniform(*settings.fault_gap)
    placed.sort(key=lambda f: (f.at, f.kind.value))
    return [dataclasses.replace(f, number=n) for n, f in enumerate(placed, 1)]


def _clear(fault: Fault, at: float, placed: Sequence[Fault], margin: float) -> bool:
    """Whether ``fault`` at ``at`` keeps ``margin`` seconds from every control-plane fault."""
    if fault.kind not in CONTROL_PLANE_FAULTS:
        return True
    return all(
        at + fault.lasts + margin <= other.at or at >= other.ends + margin
        for other in placed
        if other.kind in CONTROL_PLANE_FAULTS
    )


def _moved_clear(
    fault: Fault, placed: Sequence[Fault], margin: float, start: float, duration: float
) -> Fault:
    """``fault`` at the nearest time (the earlier on a tie) that is :func:`_clear`."""
    if _clear(fault, fault.at, placed, margin):
        return fault
    others = [f for f in placed if f.kind in CONTROL_PLANE_FAULTS]
    candidates = {o.ends + margin for o in others} | {o.at - margin - fault.lasts for o in others}
    fitting = [
        c
        for c in candidates
        if start <= c and c + fault.lasts <= duration and _clear(fault, c, placed, margin)
    ]
    if not fitting:
        raise ValueError(f"no room for {fault.kind} in a run of {duration:g}s")
    best = min(fitting, key=lambda c: (abs(c - fault.at), c))
    return dataclasses.replace(fault, at=round(best, 1))


# -- playing --------------------------------------------------------------------------------


def choose(candidates: Sequence[str], pick: float, *, avoid: Sequence[str] = ()) -> str | None:
    """The candidate ``pick`` (in [0, 1)) names among the sorted ``candidates``.

    Those in ``avoid`` (a node a fault already hits) are passed over while others remain.
    None when there is no candidate.
    """
    pool = sorted(set(candidates) - set(avoid)) or sorted(set(candidates))
    if not pool:
        return None
    return pool[min(len(pool) - 1, int(pick * len(pool)))]


def describe(step: Step) -> str:
    """One line about ``step`` for the run's output."""
    if isinstance(step, Inject):
        lasting = f", undone after {step.fault.lasts:g}s" if step.fault.lasts else ""
        return f"fault {step.fault.label}{lasting}"
    if isinstance(step, Undo):
        return f"undo {step.fault.label}"
    where = f"t{step.tenant}/{step.domain}"
    if isinstance(step, Create):
        shape = step.shape
        return f"create {where}: {shape.pods} pod(s) {shape.layout}, clique {shape.clique}"
    if isinstance(step, Scale):
        return f"scale {where} to {step.pods} pod(s)"
    return f"delete {where} ({'pods' if step.pods_first else 'domain'} first)"


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([smh]))+|\d+(?:\.\d+)?")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smh])")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds from ``30m``, ``150s``, ``1h30m`` or a bare number of seconds."""
    text = text.strip()
    if not _DURATION.fullmatch(text):
        raise ValueError(f"not a duration: {text!r} (examples: 30m, 150s, 1h30m, 90)")
    if text.replace(".", "", 1).isdigit():
        return float(text)
    return sum(float(number) * _UNIT[unit] for number, unit in _PART.findall(text))
