"""What the IMEX agent tells others: the node's ImexStatus file and its own pod's IMEXReady.

One writer, the agent (``imexagent.report``); two readers: the kubelet plugin reads the file
before it lets a channel claim through, the controller reads the pod to count a member Ready.
All three build and parse through this module; no reader takes a value out of a message text.

Two things the contract rules out:

- **A dead agent's READY.** IMEX dies with its agent, but a file and a condition outlive both.
  The agent rewrites the file every heartbeat interval even when nothing changed, and a reader
  treats a file whose heartbeat is older than its bound as stale (:func:`staleness`). The pod
  condition carries no heartbeat (a pod write per node every few seconds would load the API
  server for nothing): the controller trusts it only while the agent container runs and the
  condition was written by that very run of the agent (:func:`current`). Each run of the
  agent has a start identity (:class:`AgentStart`): the pod, a random ID, the start time.
- **A True condition read against a domain it was not computed for.** A pod condition has no
  free fields, so the domain and the start identity are annotations of the agent's own pod.
  The agent writes the condition and both annotations in ONE ``pods/status`` patch (the status
  subresource of a pod accepts metadata changes): the API server applies it as one update, so
  every reader sees the three from the same report. When the domain changes, the first report
  for the new domain is ``Starting`` (IMEX restarts), so True never carries over either.

**Agents from before this contract** (chart 0.1.0 builds that predate heartbeats and the two
annotations) still run on nodes after an upgrade when the agent DaemonSet is ``OnDelete``, until
each node's agent pod is rolled. Their reports are read here too, marked ``legacy``, with what
they do carry and nothing taken out of message text: a status file without a heartbeat and
without an agent identity is believed as it stands (such an agent rewrites it on every change
and when it stops); a condition counts as current when it was probed after the running
container started; its domain is unknown, so the controller reads it against the node's own
label and frees a slot only once the agent says ``Stopped`` or ``Idle``.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import pathlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains import nodefiles, rfc3339
from computedomains.api import constants

DOMAIN_ANNOTATION = f"{constants.OWN_PREFIX}/imex-domain"
"""On the agent's pod: the domain UID its IMEXReady condition speaks of ("" when none)."""
START_ANNOTATION = f"{constants.OWN_PREFIX}/imex-agent-start"
"""On the agent's pod: the :class:`AgentStart` (JSON) of the run that wrote the condition."""
AGENT_CONTAINER = "imex-agent"
"""The agent's container in its pod (the chart's DaemonSet): the controller checks it runs."""
HEARTBEAT_INTERVAL = 5.0
"""Default seconds between rewrites of an unchanged status file (the agent's setting)."""
MAX_AGE = 30.0
"""Default seconds after its last heartbeat that a status file is stale (the plugin's
setting): six heartbeats, so an agent loop held up by a slow IMEX stop (15 s) or a slow
``nvidia-imex-ctl`` (10 s) does not make a live agent look dead."""


class State(enum.StrEnum):
    """``state`` of the ImexStatus file."""

    READY = "READY"
    """IMEX answers READY for ``domainUID``."""
    NOT_READY = "NOT_READY"
    """Starting, or waiting for a slot or for peers."""
    FAILED = "FAILED"
    """IMEX failed; ``message`` carries its own error text."""
    STOPPED = "STOPPED"
    """No IMEX: the node left ``domainUID`` (or, with an empty one, has no clique)."""


class Reason(enum.StrEnum):
    """``reason`` of the IMEXReady condition."""

    READY = "Ready"
    STARTING = "Starting"
    FAILED = "Failed"
    STOPPED = "Stopped"
    IDLE = "Idle"


def _format(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse_time(value: object) -> datetime.datetime | None:
    """An RFC 3339 time in UTC; None when absent or not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


@dataclasses.dataclass(frozen=True)
class AgentStart:
    """One run of the agent: its pod, a random ID and when the process started."""

    pod_uid: str
    start_id: str
    started_at: datetime.datetime
    """Timezone-aware; from the node's clock, as the kubelet's container ``startedAt``."""

    @classmethod
    def new(cls, pod_uid: str, *, now: datetime.datetime) -> AgentStart:
        """The identity of a run starting ``now``."""
        return cls(pod_uid, secrets.token_hex(8), now)

    def to_wire(self) -> dict[str, str]:
        """The JSON object of the file's ``agent`` field and of the start annotation."""
        return {
            "podUID": self.pod_uid,
            "startID": self.start_id,
            "startedAt": _format(self.started_at),
        }

    @classmethod
    def from_wire(cls, raw: object) -> AgentStart | None:
        """The identity in ``raw``; None when it is not a complete one."""
        if not isinstance(raw, Mapping):
            return None
        started = _parse_time(raw.get("startedAt"))
        start_id = raw.get("startID")
        if started is None or not isinstance(start_id, str) or not start_id:
            return None
        return cls(str(raw.get("podUID") or ""), start_id, started)

    def annotation(self) -> str:
        """The value of :data:`START_ANNOTATION`."""
        return json.dumps(self.to_wire(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_annotation(cls, value: str) -> AgentStart | None:
        """The identity in a :data:`START_ANNOTATION` value; None when it is not one."""
        try:
            return cls.from_wire(json.loads(value))
        except ValueError:
            return None


# -- the node-local status file ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ImexStatus:
    """The ImexStatus file (docs/node-side.md)."""

    node: str
    domain_uid: str
    state: State
    message: str
    """IMEX's own words when it is not READY; empty when it is."""
    updated_at: datetime.datetime | None
    """When the agent last wrote a different report; None when the file does not say."""
    heartbeat_at: datetime.datetime | None
    """When the agent last rewrote the file; None in a file from before heartbeats."""
    agent: AgentStart | None
    """The run of the agent that wrote it; None in a file from before start identities."""

    def to_document(self) -> dict[str, Any]:
        """The versioned JSON document."""
        body: dict[str, Any] = {
            "node": self.node,
            "domainUID": self.domain_uid,
            "state": self.state.value,
            "message": self.message,
        }
        if self.updated_at is not None:
            body["updatedAt"] = _format(self.updated_at)
        if self.heartbeat_at is not None:
            body["heartbeatAt"] = _format(self.heartbeat_at)
        if self.agent is not None:
            body["agent"] = self.agent.to_wire()
        return nodefiles.document(constants.IMEX_STATUS_KIND, body)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> ImexStatus:
        """Parse a document :func:`nodefiles.read_json` accepted; ValueError when unusable."""
        try:
            state = State(str(document.get("state")))
        except ValueError:
            raise ValueError(f"unknown IMEX state {document.get('state')!r}") from None
        return cls(
            node=str(document.get("node") or ""),
            domain_uid=str(document.get("domainUID") or ""),
            state=state,
            message=str(document.get("message") or ""),
            updated_at=_parse_time(document.get("updatedAt")),
            heartbeat_at=_parse_time(document.get("heartbeatAt")),
            agent=AgentStart.from_wire(document.get("agent")),
        )


def write_status(path: pathlib.Path, status: ImexStatus) -> None:
    """Atomically replace the status file.

    Not fsynced (``boot_scoped``): it is rewritten every few seconds, and after a power loss
    whatever survived is stale by its heartbeat anyway.
    """
    nodefiles.write_json(path, status.to_document(), boot_scoped=True)


def read_status(path: pathlib.Path) -> ImexStatus | None:
    """The status file, None while there is none; :class:`nodefiles.CorruptNodeFile` if bad."""
    document = nodefiles.read_json(path, kind=constants.IMEX_STATUS_KIND)
    if document is None:
        return None
    try:
        return ImexStatus.from_document(document)
    except ValueError as exc:
        raise nodefiles.CorruptNodeFile(path, str(exc)) from None


def staleness(status: ImexStatus, *, now: datetime.datetime, max_age: float) -> str:
    """Why ``status`` can no longer be believed, in words; "" while it is fresh.

    Fresh: the heartbeat is at most ``max_age`` seconds old. A heartbeat as far in the future
    counts as stale too: the clock was set back, and the file proves nothing about now.
    """
    if status.heartbeat_at is None:
        if status.agent is None:
            return ""  # a legacy agent's file (see the module docstring): no heartbeat to check
        return "the IMEX status names its agent but has no heartbeat: it is not one to believe"
    age = (now - status.heartbeat_at).total_seconds()
    if age < -max_age:
        return f"the IMEX status is stale: its heartbeat lies {-age:.0f}s in the future"
    if age > max_age:
        return (
            f"the IMEX status is stale: its last heartbeat was {age:.0f}s ago (the bound is "
            f"{max_age:g}s), so the IMEX agent on this node is not running"
        )
    return ""


# -- the agent's pod: the IMEXReady condition and its annotations ------------------------


@dataclasses.dataclass(frozen=True)
class PodReport:
    """What the agent's pod says about IMEX: its condition and the annotations beside it."""

    ready: bool
    """The condition's status: True only when IMEX answers READY for ``domain_uid``."""
    reason: str
    """A :class:`Reason` value (a newer agent may send one this reader does not know)."""
    message: str
    """For people; nothing is parsed out of it."""
    domain_uid: str
    """The domain the report speaks of; "" when idle, and for a legacy agent (unknown)."""
    agent: AgentStart | None
    """The run that wrote it; None when the annotation is missing or unreadable."""
    probed_at: datetime.datetime | None = None
    """The condition's ``lastProbeTime``: when the agent last wrote it."""
    legacy: bool = False
    """Written by an agent from before the two annotations (see the module docstring)."""


def status_patch(
    report: PodReport,
    *,
    uid: str,
    conditions: Sequence[Mapping[str, Any]],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The ``pods/status`` strategic merge patch that publishes ``report``.

    One patch for the condition and both annotations (see the module docstring).
    ``conditions`` are the pod's current ones: the transition time moves only when the
    status changes, as for the kubelet's own. ``uid``, the writer's own pod (when known),
    makes the write fail rather than land on a newer pod of the same name.
    """
    status = "True" if report.ready else "False"
    stamp = rfc3339.stamp(now)
    previous = next(
        (c for c in conditions if c.get("type") == constants.IMEX_READY_CONDITION), None
    )
    transition = stamp
    if previous is not None and previous.get("status") == status:
        transition = previous.get("lastTransitionTime") or stamp
    annotations = {DOMAIN_ANNOTATION: report.domain_uid}
    if report.agent is not None:
        annotations[START_ANNOTATION] = report.agent.annotation()
    metadata: dict[str, Any] = {"annotations": annotations}
    if uid:
        metadata["uid"] = uid
    condition = {"type": constants.IMEX_READY_CONDITION, "status": status,
                 "reason": report.reason, "message": report.message,
                 "lastProbeTime": stamp, "lastTransitionTime": transition}  # fmt: skip
    # Pod conditions merge by type in a strategic merge patch: no other condition is touched.
    return {"metadata": metadata, "status": {"conditions": [condition]}}


def pod_report(pod: Mapping[str, Any]) -> PodReport | None:
    """The report on an agent pod; None before the agent wrote its condition."""
    condition = next(
        (
            c
            for c in pod.get("status", {}).get("conditions") or []
            if c.get("type") == constants.IMEX_READY_CONDITION
        ),
        None,
    )
    if condition is None:
        return None
    annotations = pod.get("metadata", {}).get("annotations") or {}
    start = annotations.get(START_ANNOTATION)
    return PodReport(
        ready=condition.get("status") == "True",
        reason=str(condition.get("reason") or ""),
        message=str(condition.get("message") or ""),
        domain_uid=str(annotations.get(DOMAIN_ANNOTATION) or ""),
        agent=AgentStart.from_annotation(start) if isinstance(start, str) else None,
        probed_at=_parse_time(condition.get("lastProbeTime")),
        legacy=DOMAIN_ANNOTATION not in annotations and START_ANNOTATION not in annotations,
    )


def running_since(pod: Mapping[str, Any]) -> datetime.datetime | None:
    """When the pod's running agent container started (the kubelet's ``startedAt``).

    None when the container is not running (crashed, backing off, never started) or the pod
    does not report it.
    """
    for entry in pod.get("status", {}).get("containerStatuses") or []:
        if entry.get("name") == AGENT_CONTAINER:
            running = (entry.get("state") or {}).get("running")
            return _parse_time(running.get("startedAt")) if isinstance(running, Mapping) else None
    return None


def current(report: PodReport, *, since: datetime.datetime | None) -> bool:
    """Whether ``report`` was written by the run of the agent container running ``since``.

    The kubelet starts the container before the agent process records its start, both by the
    node's clock, and writes ``startedAt`` in whole seconds (rounded down): a report from this
    run has a start at or after ``since``, one from an earlier run (before a crash) is older.
    A legacy report has no start: it counts when it was probed at or after ``since``, which
    such an agent does at least once per run.
    """
    if since is None:
        return False
    if report.legacy:
        return report.probed_at is not None and report.probed_at >= since
    return report.agent is not None and report.agent.started_at >= since
