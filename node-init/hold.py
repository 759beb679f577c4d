"""Whether a check's verdict replaces the published one, or a usable verdict is held: pure.

A node in a ComputeDomain runs a job over IMEX; publishing an unusable verdict there takes its
clique label and its channels away and stops IMEX under the job. A failed NVML call or a
registration that is briefly in progress again says little about the fabric, so while the node
is in a domain the last usable verdict is held through such faults for the fault grace
(``fabricverdict.Grace``). Faults that waiting cannot fix (a failed registration, an old
driver, GPUs that disagree) are published at once, as is everything on a node no job uses.

Whether the node is in a domain is asked of the membership record (:func:`in_domain`), not of
the node's domain label: that is only the controller's copy of the record, which a refused or
late label write leaves behind.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from computedomains.api import fabricverdict, placement
from computedomains.fabric.model import Reason, Verdict


class Action(enum.StrEnum):
    """What to do with the verdict of one check."""

    PUBLISH = "publish"
    """Write the verdict: file, clique label, condition, taint."""
    HOLD = "hold"
    """Leave the usable verdict that is published as it is (file, label and condition)."""
    DEGRADE = "degrade"
    """Publish the unusable verdict in place of a usable one, and say so in a Warning Event."""


class EventReason(enum.StrEnum):
    """Reason of the Warning Event a :data:`Action.DEGRADE` records on the Node."""

    FAULT_SUSTAINED = "NVLinkFabricFaultSustained"
    """A fault that may pass outlasted the grace."""
    UNUSABLE = "NVLinkFabricUnusable"
    """The fabric became unusable in a way that waiting cannot fix, or off any domain."""


@dataclasses.dataclass(frozen=True)
class Spell:
    """Consecutive failed checks while a usable verdict is held."""

    since: float
    """Monotonic time of the first failed check."""
    failures: int


@dataclasses.dataclass(frozen=True)
class NodeEvent:
    """The Warning Event to record on the Node."""

    reason: EventReason
    message: str


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do, and the spell to carry to the next check (None: no fault in progress)."""

    action: Action
    spell: Spell | None = None
    event: NodeEvent | None = None
    """Set for :data:`Action.DEGRADE`."""
    note: str = ""
    """A line for the log: a verdict held, a fault that passed."""


def passing(verdict: Verdict) -> bool:
    """Whether ``verdict`` is a fault that may pass: NVML unreachable, registration in progress.

    A registration in progress has its own bound as well: the transitional grace turns it into
    a permanent verdict.
    """
    return (
        verdict.kind is fabricverdict.VerdictKind.TRANSITIONAL
        or verdict.reason is Reason.DISCOVERY_FAILED
    )


def asks_membership(verdict: Verdict, *, published_usable: bool) -> bool:
    """Whether :func:`decide` turns on ``in_domain``: a passing fault over a usable verdict.

    Only then is the record read (an API call), not on every check.
    """
    return published_usable and not verdict.usable and passing(verdict)


def in_domain(
    node_name: str,
    *,
    clique: str,
    cliques: Mapping[str, Mapping[str, Any]],
    label: str,
    held: bool,
) -> bool:
    """Whether the node is in a ComputeDomain, for the grace.

    ``held``: the kubelet plugin's prepared claims hold the node for a domain (False outside
    the plugin). Else the membership record says (``placement.recorded_member``): ``cliques``
    are the clique objects of ``clique``, the clique of the published verdict, by domain UID.
    The node's domain label ``label`` counts only where the record cannot say: objects from a
    controller that keeps no record, or a node in no clique (a member without a fabric), of
    which no clique object speaks.
    """
    if held:
        return True
    if not clique:
        return bool(label)
    return placement.recorded_member(node_name, cliques, legacy_label=label)


def decide(
    verdict: Verdict,
    *,
    published_usable: bool,
    in_domain: bool,
    spell: Spell | None,
    now: float,
    grace: fabricverdict.Grace,
) -> Decision:
    """The decision for a check that found ``verdict``.

    ``published_usable``: the verdict now published is usable; ``in_domain``: the node is in
    a ComputeDomain (:func:`in_domain`; read only where :func:`asks_membership`); ``spell``:
    the fault in progress, if any.
    """
    if verdict.usable or not published_usable:
        passed = f"the fault passed after {spell.failures} failed check(s)" if spell else ""
        return Decision(Action.PUBLISH, note=passed)
    if not (in_domain and passing(verdict)):
        lead = "the NVLink fabric is no longer usable"
        return Decision(Action.DEGRADE, event=_event(EventReason.UNUSABLE, lead, verdict))
    since = now if spell is None else spell.since
    failures = 1 if spell is None else spell.failures + 1
    if grace.sustained(failures=failures, elapsed=now - since):
        lead = (
            f"the NVLink fabric check failed {failures} times in a row over {now - since:.0f}s, "
            f"past the fault grace ({grace.checks} checks or {grace.seconds:g}s)"
        )
        return Decision(Action.DEGRADE, event=_event(EventReason.FAULT_SUSTAINED, lead, verdict))
    note = (
        f"keeping the last usable verdict while the node is in a ComputeDomain: failed check "
        f"{failures} of {grace.checks}, {now - since:.0f}s of {grace.seconds:g}s"
    )
    return Decision(Action.HOLD, Spell(since=since, failures=failures), note=note)


def _event(reason: EventReason, lead: str, verdict: Verdict) -> NodeEvent:
    return NodeEvent(
        reason,
        f"{lead}: {verdict.reason} ({verdict.message}); the node's clique label and IMEX "
        "channels are withdrawn, so IMEX stops here until the fabric is usable again",
    )
