"""The formation trace: one structured log line per stage a component sees a node pass.

Each component already sees its part of a formation happen (the plugin a prepare call, the
controller an allocation and a slot, the agent a membership and IMEX's answer). It logs each
as one JSON object on the logger :data:`LOGGER`, stamped with the wall clock, so that a
formation can be followed stage by stage across processes from their logs alone
(``tests/benchmarks`` does; so can a log pipeline on a real cluster). Lines are written on
transitions only, never per loop pass: a handful per node per formation.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

LOGGER = "computedomains.trace"
"""The logger every trace line is written to; its records' message is the JSON object."""
MARK = f"{LOGGER}: "
"""What precedes the JSON object in the components' log format (``<name>: <message>``)."""


class Stage(enum.StrEnum):
    """The stages of one node joining a domain, in the order they happen."""

    CLAIM_ALLOCATED = "claim-allocated"
    """Controller: it takes up a claim of the domain allocated on the node, to answer it."""
    NODE_RESERVED = "node-reserved"
    """Controller: it answered the claim's binding condition (the node is the domain's)."""
    PREPARE_CALLED = "prepare-called"
    """Plugin: the kubelet asked it to prepare the claim."""
    CLIQUE_WRITTEN = "clique-written"
    """Controller: the node's slot is written in its clique object (the membership record)."""
    NODE_LABELED = "node-labeled"
    """Controller: the node carries the domain's label (the record's copy)."""
    MEMBERSHIP_SEEN = "membership-seen"
    """Agent: it saw the node's slot in the clique object."""
    CONFIG_RENDERED = "config-rendered"
    """Agent: IMEX's config and hosts file are written for the membership."""
    IMEX_STARTED = "imex-started"
    """Agent: ``nvidia-imex`` was started (or told to reload) for the membership."""
    IMEX_READY = "imex-ready"
    """Agent: ``nvidia-imex-ctl -q`` answered READY and the node-local status says so."""
    PREPARE_RETURNED = "prepare-returned"
    """Plugin: prepare answered the kubelet with the claim's devices."""
    MEMBER_READY = "member-ready"
    """Controller: the member's readiness (the agent's condition) is written to the domain."""


@dataclasses.dataclass(frozen=True)
class Event:
    """One trace line."""

    stage: Stage
    domain: str
    """The ComputeDomain's uid."""
    node: str
    at: float
    """Wall-clock seconds since the epoch."""
    component: str
    claim: str = ""
    """The ResourceClaim's uid, where the stage concerns one."""

    def to_json(self) -> str:
        """The line's JSON object."""
        body = {"stage": self.stage.value, "domain": self.domain, "node": self.node,
                "at": round(self.at, 6), "component": self.component}  # fmt: skip
        if self.claim:
            body["claim"] = self.claim
        return json.dumps(body, separators=(",", ":"))


class Tracer:
    """Writes a component's trace lines."""

    def __init__(self, component: str, *, wall: Callable[[], float] = time.time) -> None:
        self.component = component
        self._wall = wall
        self._log = logging.getLogger(LOGGER)

    def stage(self, stage: Stage, *, domain: str, node: str, claim: str = "") -> None:
        """Record that ``node`` reached ``stage`` of domain ``domain`` now."""
        if not self._log.isEnabledFor(logging.INFO):
            return
        event = Event(stage, domain, node, self._wall(), self.component, claim)
        self._log.info("%s", event.to_json())


def parse(lines: Iterable[str]) -> Iterator[Event]:
    """The trace events in log lines, text or JSON (``--log-format``).

    Other lines, and lines that do not parse, are skipped.
    """
    for line in lines:
        try:
            body = _body(line)
            if body is None:
                continue
            yield Event(
                Stage(body["stage"]), str(body["domain"]), str(body["node"]),
                float(body["at"]), str(body["component"]), str(body.get("claim", "")),
            )  # fmt: skip
        except (ValueError, KeyError, TypeError):
            continue


def _body(line: str) -> dict[str, Any] | None:
    """A trace line's JSON object, from a text line (after :data:`MARK`) or a JSON line."""
    if line.startswith("{"):
        record = json.loads(line)
        if not isinstance(record, dict) or record.get("logger") != LOGGER:
            return None
        return cast(dict[str, Any], json.loads(str(record.get("message", ""))))
    where = line.find(MARK)
    return None if where < 0 else cast(dict[str, Any], json.loads(line[where + len(MARK) :]))


def first_reached(events: Iterable[Event], *, domain: str) -> dict[Stage, dict[str, float]]:
    """Per stage, per node: when the node first reached it in ``domain``'s formation."""
    reached: dict[Stage, dict[str, float]] = {}
    for event in events:
        if event.domain != domain:
            continue
        nodes = reached.setdefault(event.stage, {})
        nodes[event.node] = min(event.at, nodes.get(event.node, event.at))
    return reached


def all_reached(
    events: Iterable[Event], *, domain: str, nodes: int, since: float
) -> dict[Stage, float]:
    """Seconds from ``since`` until every one of ``nodes`` nodes had reached each stage.

    Stages fewer nodes reached (one a formation skipped) are left out.
    """
    return {
        stage: max(times.values()) - since
        for stage, times in first_reached(events, domain=domain).items()
        if len(times) >= nodes
    }
