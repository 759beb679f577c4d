"""What must hold however the faults fall, judged over snapshots (pure).

Each invariant is a function of one snapshot, or of two in a row, and of the :class:`Context`
the run keeps (the faults so far, the domains it runs and deleted, the pods it removed). It
returns :class:`Violation` s. Some states are normal for a moment (a node label written a
little after the status it copies, a file being rewritten, IMEX starting again after a kill):
such a violation carries a ``hold``, the seconds it must be seen in a row before it counts
(:func:`confirm`). The rest count at once.

The invariants, as the run checks them after every step:

- **A running workload pod keeps its channel and its node's IMEX** (:func:`channels_kept`,
  :func:`imex_kept`): a pod the run did not delete keeps running, on the same claim and
  devices, its claim's CDI spec and completed checkpoint entry stay on its node; its node stays
  a member of its domain with the same slot, labelled for it, and IMEX there runs READY for
  the domain (a while after a fault on that node ends). A pod whose node's fabric failed while
  it ran is exempt (:func:`fabric_exempt`).
- **Nothing is held twice** (:func:`nothing_held_twice`): a device by two claims, a slot of a
  clique by two daemons, a node by two domains (running pods, completed checkpoint entries,
  or the membership record for longer than a moment).
- **Domains form** (:func:`domains_form`): a domain whose pods all run is Ready within
  ``bounds.ready`` of its last change, the faults' durations since added.
- **Deleted domains leave nothing behind** (:func:`deletions_complete`): within
  ``bounds.leftovers`` of the deletion, no ComputeDomain, clique, claim, template, node label,
  device hold, CDI spec, checkpoint entry or running IMEX names it.
- **Components come back** (:func:`components_ready`): no chart pod stays unready for
  ``bounds.component`` seconds outside a fault.

And at the end, after the last fault: every domain Ready with all its pods running, every chart
pod ready, and no container restarting while nothing is done to it (:func:`final`,
:func:`restarted`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import types
from collections.abc import Iterable, Mapping

from cdsim.chaos.snapshot import Pod, Snapshot, restarts

COMPLETED = "PrepareCompleted"
ABORTED = "PrepareAborted"


@dataclasses.dataclass(frozen=True)
class Violation:
    """A broken invariant: which, about what, in words."""

    invariant: str
    subject: str
    """What it is about (a pod, a node, a domain); with ``invariant``, its identity."""
    message: str
    hold: float = 0.0
    """Seconds it must be seen in a row before it counts (0: at once)."""

    @property
    def key(self) -> str:
        """``invariant:subject``: the same violation seen again has the same key."""
        return f"{self.invariant}:{self.subject}"


@dataclasses.dataclass(frozen=True)
class Window:
    """A fault from its injection to its undo (an instant fault: a moment)."""

    kind: str
    node: str
    """The node it hit; "" for a fault of no one node (the control plane, a controller)."""
    start: float
    end: float | None
    """None while it lasts."""
    breaks_fabric: bool = False

    def active(self, at: float) -> bool:
        """Whether it lasts at ``at``."""
        return self.start <= at and (self.end is None or at < self.end)

    def overlap(self, since: float, until: float) -> float:
        """Seconds of [``since``, ``until``] it lasted."""
        end = until if self.end is None else min(self.end, until)
        return max(0.0, end - max(self.start, since))


@dataclasses.dataclass(frozen=True)
class Bounds:
    """Seconds the run allows for each kind of recovery."""

    ready: float = 180.0
    """From a domain's last change to Ready (plus the faults since)."""
    recover: float = 60.0
    """From the end of the last fault to a formed domain Ready again (a fault may undo it)."""
    leftovers: float = 180.0
    """From a domain's deletion to nothing left of it (plus the faults since)."""
    imex: float = 60.0
    """IMEX not READY for a running pod's domain, outside a fault on its node."""
    settle: float = 30.0
    """A state that may trail another (a label, a file, a record rewritten)."""
    component: float = 120.0
    """A chart pod unready outside a fault."""
    quiet: float = 30.0
    """The watch for restarts once everything is back, at the end."""


@dataclasses.dataclass(frozen=True)
class Context:
    """What the run knows beyond the snapshot."""

    windows: tuple[Window, ...] = ()
    expected: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    """Live domains (``namespace/name``) → the pods each should run."""
    changed: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    """Live domains → when last created or scaled."""
    deleted: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    """Deleted domains' UIDs → when their deletion was asked."""
    removed: frozenset[str] = frozenset()
    """Pods (``namespace/name``) the run deleted."""
    exempt: frozenset[str] = frozenset()
    """Pods whose node's fabric failed while they ran (:func:`fabric_exempt`)."""
    bounds: Bounds = Bounds()

    def active(self, at: float, *, node: str | None = None) -> bool:
        """Whether a fault lasts at ``at``: any, or (``node``) one of that node or of none."""
        return any(w.active(at) and (node is None or w.node in ("", node)) for w in self.windows)

    def due(self, since: float, bound: float, at: float) -> bool:
        """Whether ``bound`` seconds have passed since ``since``, the faults' time not counted.

        Never while a fault lasts: what is due is judged between faults and at the end.
        """
        if self.active(at):
            return False
        extra = sum(w.overlap(since, at) for w in self.windows)
        return at >= since + bound + extra

    def last_fault_end(self, at: float) -> float:
        """When the last fault ended before ``at`` (an instant one: when it was done)."""
        ends = [w.end for w in self.windows if w.end is not None and w.end <= at]
        return max(ends, default=-math.inf)


def confirm(
    pending: Mapping[str, float], found: Iterable[Violation], at: float
) -> tuple[list[Violation], dict[str, float]]:
    """The violations that count now, and when each one still seen was first seen.

    A violation counts once it has been seen in every snapshot for its ``hold``; one not seen
    now starts over if it comes back.
    """
    counted = []
    first_seen: dict[str, float] = {}
    for violation in found:
        since = first_seen.setdefault(violation.key, pending.get(violation.key, at))
        if at - since >= violation.hold:
            counted.append(violation)
    return counted, first_seen


def fabric_exempt(now: Snapshot, ctx: Context) -> set[str]:
    """Pods on a node whose fabric is failed now (or was until a moment ago)."""
    broken = {
        w.node
        for w in ctx.windows
        if w.breaks_fabric
        and w.start <= now.at
        and (w.end is None or now.at <= w.end + ctx.bounds.settle)
    }
    return {p.key for p in now.pods if p.node in broken}


def _watched(pod: Pod, ctx: Context) -> bool:
    return pod.running and pod.key not in ctx.removed and pod.key not in ctx.exempt


# -- a running pod keeps its channel and its IMEX ------------------------------------------


def channels_kept(prev: Snapshot, now: Snapshot, ctx: Context) -> list[Violation]:
    """A pod that ran and that nobody deleted still runs, with its claim, spec and entry."""
    found = []
    for before in prev.pods:
        if not _watched(before, ctx):
            continue
        after = now.pod(before.key)
        if after is None or after.uid != before.uid:
            found.append(
                Violation(
                    "pod-lost",
                    before.key,
                    f"pod {before.key} ran on {before.node} and "
                    "is gone, though the run did not delete it",
                )
            )
        elif not after.running:
            found.append(
                Violation(
                    "pod-lost",
                    before.key,
                    f"pod {before.key} ran on {before.node} and is {after.phase} now",
                )
            )
        else:
            was = {c.uid: (c.node, c.devices) for c in prev.claims_of(before)}
            now_has = {c.uid: (c.node, c.devices) for c in now.claims_of(after)}
            if was and now_has and was != now_has:
                found.append(
                    Violation(
                        "channel-lost",
                        before.key,
                        f"pod {before.key}'s channel claims were {was}, they are {now_has} now",
                    )
                )
    for pod in now.pods:
        if _watched(pod, ctx):
            found += _channel_in_place(pod, now, ctx)
    return found


def _channel_in_place(pod: Pod, now: Snapshot, ctx: Context) -> list[Violation]:
    """The running pod's claim is allocated on its node, and prepared there."""
    hold = ctx.bounds.settle
    claims = now.claims_of(pod)
    if not claims:
        return [
            Violation("channel-lost", pod.key, f"pod {pod.key} runs without a channel claim", hold)
        ]
    found = []
    files = now.files_of(pod.node)
    for claim in claims:
        if claim.node != pod.node:
            found.append(
                Violation(
                    "channel-lost",
                    f"{pod.key}:{claim.name}",
                    f"pod {pod.key} runs on "
                    f"{pod.node}, its claim {claim.name} is allocated on "
                    f"{claim.node or 'no node'}",
                    hold,
                )
            )
        if files is None:
            continue
        if claim.uid not in {s.claim_uid for s in files.specs}:
            found.append(
                Violation(
                    "channel-lost",
                    f"{pod.key}:cdi",
                    f"pod {pod.key} runs, but {pod.node} "
                    f"has no CDI spec for its claim {claim.name}",
                    hold,
                )
            )
        if files.checkpoint is not None:
            entry = next((e for e in files.checkpoint if e.claim_uid == claim.uid), None)
            if entry is None or entry.state != COMPLETED:
                state = entry.state if entry else "no entry"
                found.append(
                    Violation(
                        "channel-lost",
                        f"{pod.key}:checkpoint",
                        f"pod {pod.key} runs, but "
                        f"{pod.node}'s checkpoint has {state} for its claim {claim.name}",
                        hold,
                    )
                )
    return found


def imex_kept(prev: Snapshot, now: Snapshot, ctx: Context) -> list[Violation]:
    """A pod's node stays its domain's member, in its slot, labelled, with IMEX READY for it."""
    found = []
    for pod in now.pods:
        before = prev.pod(pod.key)
        if not _watched(pod, ctx) or before is None or not before.running:
            continue  # judged once it has run from one snapshot to the next
        domain = now.domain(pod.domain_key)
        if domain is None or domain.deleting:
            continue
        subject = f"{domain.key}@{pod.node}"
        if not any(c.is_member(pod.node) for c in now.cliques_of(domain.uid)):
            found.append(
                Violation(
                    "imex-lost",
                    f"{subject}:member",
                    f"{pod.node} runs pod {pod.key}, but "
                    f"the membership record of {domain.key} does not name it",
                    ctx.bounds.settle,
                )
            )
        slots_before = {
            i for c in prev.cliques_of(domain.uid) if (i := c.index_of(pod.node)) is not None
        }
        slots_now = {
            i for c in now.cliques_of(domain.uid) if (i := c.index_of(pod.node)) is not None
        }
        if slots_before and slots_now and slots_before != slots_now:
            found.append(
                Violation(
                    "slot-moved",
                    subject,
                    f"{pod.node}'s slot in {domain.key} moved from "
                    f"{sorted(slots_before)} to {sorted(slots_now)} under pod {pod.key}",
                )
            )
        node = now.node(pod.node)
        if node is not None and node.domain_label != domain.uid:
            found.append(
                Violation(
                    "imex-lost",
                    f"{subject}:label",
                    f"{pod.node} runs pod {pod.key} of "
                    f"{domain.key} ({domain.uid}), its label says "
                    f"{node.domain_label or 'nothing'}",
                    ctx.bounds.settle,
                )
            )
        files = now.files_of(pod.node)
        if (
            files is not None
            and not ctx.active(now.at, node=pod.node)
            and files.imex_ready_for != domain.uid
        ):
            state = files.imex_state or "without a status"
            what = f"{state} for {files.imex_domain or 'no domain'}"
            what = what if files.imex_running else "not running"
            found.append(
                Violation(
                    "imex-lost",
                    f"{subject}:imex",
                    f"{pod.node} runs pod {pod.key} of {domain.key}, its IMEX is {what}",
                    ctx.bounds.imex,
                )
            )
    return found


# -- nothing is held twice -------------------------------------------------------------------


def nothing_held_twice(now: Snapshot, ctx: Context) -> list[Violation]:
    """No device, slot or node is held by two claims, daemons or domains."""
    return [*_devices_twice(now), *_nodes_twice(now, ctx), *_slots_twice(now, ctx)]


def _devices_twice(now: Snapshot) -> list[Violation]:
    devices: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for claim in now.claims:
        for device in claim.devices:
            devices[(claim.node, device)].add(claim.uid or claim.name)
    return [
        Violation(
            "channel-held-twice",
            f"{node}/{device}",
            f"{device} on {node} is allocated to {sorted(holders)}",
        )
        for (node, device), holders in sorted(devices.items())
        if len(holders) > 1
    ]


def _nodes_twice(now: Snapshot, ctx: Context) -> list[Violation]:
    found = []
    running: dict[str, set[str]] = collections.defaultdict(set)
    for pod in now.pods:
        if pod.running and pod.node:
            running[pod.node] |= {c.domain_uid for c in now.claims_of(pod) if c.domain_uid}
    for node, domains in sorted(running.items()):
        if len(domains) > 1:
            message = f"{node} runs pods of {len(domains)} domains: {sorted(domains)}"
            found.append(Violation("node-in-two-domains", f"{node}:pods", message))
    for files in now.files:
        prepared = {
            e.domain_uid
            for e in files.checkpoint or ()
            if e.channel and e.state == COMPLETED and e.domain_uid
        }
        if len(prepared) > 1:
            message = f"{files.node}'s checkpoint has prepared channels of {sorted(prepared)}"
            found.append(
                Violation(
                    "node-in-two-domains", f"{files.node}:checkpoint", message, ctx.bounds.settle
                )
            )
    return found


def _slots_twice(now: Snapshot, ctx: Context) -> list[Violation]:
    found = []
    records: dict[str, set[str]] = collections.defaultdict(set)
    for clique in now.cliques:
        indices = collections.Counter(d.index for d in clique.daemons if d.index is not None)
        for index, count in sorted(indices.items()):
            if count > 1:
                holders = sorted(d.node for d in clique.daemons if d.index == index)
                message = f"slot {index} of {clique.name} is held by {holders}"
                found.append(Violation("slot-held-twice", f"{clique.name}/{index}", message))
        for node in clique.members or ():
            records[node].add(clique.domain_uid)
    for node, domains in sorted(records.items()):
        if len(domains) > 1:
            # For a moment this is normal: the controller rewrites the record of the domain a
            # node left after the one it joined (placement.recorded_holder waits it out).
            message = f"the membership records of {sorted(domains)} all name {node}"
            found.append(
                Violation("node-in-two-domains", f"{node}:record", message, ctx.bounds.settle)
            )
    return found


# -- domains form, deleted ones leave nothing behind -----------------------------------------


def domains_form(now: Snapshot, ctx: Context) -> list[Violation]:
    """A domain whose pods all run is Ready within the bound (faults' time added).

    And within :attr:`Bounds.recover` of the last fault's end: a fault may undo a domain formed
    long before (its node's fabric failed, say), which needs its time to form again.
    """
    found = []
    recovered = now.at >= ctx.last_fault_end(now.at) + ctx.bounds.recover
    for key, want in sorted(ctx.expected.items()):
        if not recovered or not ctx.due(ctx.changed.get(key, 0.0), ctx.bounds.ready, now.at):
            continue
        domain = now.domain(key)
        running = [p for p in now.pods_of(key) if p.running]
        if domain is not None and not domain.ready and want and len(running) == want:
            found.append(
                Violation(
                    "domain-not-ready",
                    key,
                    f"all {want} pod(s) of {key} run "
                    f"but it is not Ready {ctx.bounds.ready:g}s after its last "
                    "change (faults' time not counted)",
                )
            )
    return found


def leftovers(now: Snapshot, uid: str) -> dict[str, list[str]]:
    """What still names the domain ``uid``, by kind (empty kinds left out)."""
    found = {
        "ComputeDomain": [d.key for d in now.domains if d.uid == uid],
        "cliques": [c.name for c in now.cliques if c.domain_uid == uid],
        "claims": [f"{c.namespace}/{c.name}" for c in now.claims if c.domain_uid == uid],
        "claim templates": [f"{t.namespace}/{t.name}" for t in now.templates if t.owner_uid == uid],
        "node labels": [n.name for n in now.nodes if n.domain_label == uid],
        "device holds": [n.name for n in now.nodes if uid in n.held_for],
        "CDI specs": [
            f"{f.node}:{s.claim_uid}" for f in now.files for s in f.specs if s.domain_uid == uid
        ],
        # An aborted entry is a mark that holds nothing (it expires with the plugin's TTL).
        "checkpoint entries": [
            f"{f.node}:{e.claim_uid}"
            for f in now.files
            for e in f.checkpoint or ()
            if e.domain_uid == uid and e.state != ABORTED
        ],
        "IMEX processes": [f.node for f in now.files if f.imex_running and f.imex_domain == uid],
    }
    return {kind: where for kind, where in found.items() if where}


def deletions_complete(now: Snapshot, ctx: Context) -> list[Violation]:
    """Nothing names a deleted domain once the bound (faults' time added) has passed."""
    found = []
    for uid, asked in sorted(ctx.deleted.items()):
        if not ctx.due(asked, ctx.bounds.leftovers, now.at):
            continue
        for kind, where in leftovers(now, uid).items():
            found.append(
                Violation(
                    "leftover",
                    f"{uid}:{kind}",
                    f"{now.at - asked:.0f}s after "
                    f"domain {uid} was deleted, its {kind} remain: "
                    f"{', '.join(sorted(where))}",
                )
            )
    return found


# -- components ------------------------------------------------------------------------------


def components_ready(now: Snapshot, ctx: Context) -> list[Violation]:
    """No chart pod stays unready for the bound outside a fault on its node or of none."""
    return [
        Violation(
            "component-down",
            c.name,
            f"{c.component} pod {c.name} on {c.node} is not ready{_waiting(c.containers)}",
            ctx.bounds.component,
        )
        for c in now.components
        if not c.ready and not ctx.active(now.at, node=c.node)
    ]


def _waiting(containers: Iterable[object]) -> str:
    reasons = sorted({w for c in containers if (w := getattr(c, "waiting", ""))})
    return f" ({', '.join(reasons)})" if reasons else ""


def check(prev: Snapshot | None, now: Snapshot, ctx: Context) -> list[Violation]:
    """Every invariant the run checks after each step."""
    found = []
    if prev is not None:
        found += channels_kept(prev, now, ctx)
        found += imex_kept(prev, now, ctx)
    found += nothing_held_twice(now, ctx)
    found += domains_form(now, ctx)
    found += deletions_complete(now, ctx)
    found += components_ready(now, ctx)
    return found


# -- the end -------------------------------------------------------------------------------


def healthy(now: Snapshot, ctx: Context, *, node: str = "") -> bool:
    """Whether everything is back: chart pods and nodes ready, domains whose pods run Ready.

    With ``node``, only what concerns that node: its chart pods, itself, the domains with pods
    there. Without, everything but what concerns a node a lasting fault still hits (another
    fault's doing). Recovery times are measured to the first snapshot after a fault where this
    holds for the fault's node (or for all).
    """
    hit = {w.node for w in ctx.windows if w.node and w.active(now.at)}

    def concerned(name: str) -> bool:
        return name == node if node else name not in hit

    if not all(c.ready for c in now.components if concerned(c.node)):
        return False
    if not all(n.ready and n.fabric_ready for n in now.nodes if concerned(n.name)):
        return False
    for key, want in ctx.expected.items():
        running = [p for p in now.pods_of(key) if p.running]
        if not want or len(running) < want:
            continue  # still placing: not a fault's doing
        if not any(concerned(p.node) for p in running):
            continue
        domain = now.domain(key)
        if domain is None or not domain.ready:
            return False
        for pod in running:
            files = now.files_of(pod.node)
            if concerned(pod.node) and files is not None and files.imex_ready_for != domain.uid:
                return False
    return True


def final(now: Snapshot, ctx: Context) -> list[Violation]:
    """After the last fault and the settling time: every domain formed, every component ready."""
    found = []
    for key, want in sorted(ctx.expected.items()):
        if not want:
            continue  # no pod of it ever came: nobody joined, so it is not Ready by design
        domain = now.domain(key)
        pods = now.pods_of(key)
        running = [p for p in pods if p.running]
        if domain is None or not domain.ready or len(running) < want:
            phases = ", ".join(f"{p.name} {p.phase}" for p in pods) or "no pods"
            state = "missing" if domain is None else "Ready" if domain.ready else "not Ready"
            found.append(
                Violation(
                    "domain-not-ready",
                    key,
                    f"at the end {key} is {state} with "
                    f"{len(running)}/{want} pod(s) running ({phases})",
                )
            )
    for component in now.components:
        if not component.ready:
            found.append(
                Violation(
                    "component-crash-looping",
                    component.name,
                    f"at the end {component.component} pod {component.name} on "
                    f"{component.node} is not ready"
                    f"{_waiting(component.containers)}",
                )
            )
    return found


def restarted(first: Snapshot, last: Snapshot) -> list[Violation]:
    """Containers that restarted between two snapshots (the quiet end of the run)."""
    before, after = restarts(first.components), restarts(last.components)
    return [
        Violation(
            "component-restarted",
            name,
            f"{name} restarted {count - before[name]} time(s) "
            f"in the {last.at - first.at:.0f}s after everything was back",
        )
        for name, count in sorted(after.items())
        if name in before and count > before[name]
    ]
