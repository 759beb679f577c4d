"""A pod's status as the kubelet writes it, from what its containers are doing (pure).

The runner (:mod:`runner`) knows each container's state, restarts and probe results; this
module turns them into ``containerStatuses``, ``initContainerStatuses``, the pod's phase and
its ``Initialized``, ``ContainersReady`` and ``Ready`` conditions, with the kubelet's reasons.
``Ready`` also needs every readiness gate's condition True, which others write.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains import rfc3339

TERMINATION_LOG_LINES = 80
TERMINATION_LOG_BYTES = 2048
"""What the kubelet keeps of a failed container's log as its termination message
(``FallbackToLogsOnError``): the last 80 lines, at most their last 2048 bytes."""


def log_tail_message(log: bytes) -> str:
    """A failed container's termination message: the end of its log.

    As the kubelet takes it under ``terminationMessagePolicy: FallbackToLogsOnError``.
    """
    tail = b"".join(log.splitlines(keepends=True)[-TERMINATION_LOG_LINES:])
    return tail[-TERMINATION_LOG_BYTES:].decode("utf-8", "replace")


def stamp(moment: datetime.datetime) -> str:
    """A time as the kubelet writes it: RFC 3339, whole seconds (rounded down)."""
    return rfc3339.stamp(moment)


class State(enum.Enum):
    """A container's state, as ``containerStatuses[].state`` has one of three."""

    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


@dataclasses.dataclass(frozen=True)
class ContainerView:
    """What the kubelet knows of one container at one moment."""

    name: str
    state: State
    reason: str = ""
    """Why it waits (``ContainerCreating``, ``PodInitializing``, ``CrashLoopBackOff``)."""
    message: str = ""
    started_at: str = ""
    """``startedAt`` of the running process."""
    exit: Mapping[str, Any] | None = None
    """The latest ``terminated`` record, once the container exited."""
    previous_exit: Mapping[str, Any] | None = None
    """The one before it."""
    ready: bool = False
    started: bool = False
    restarts: int = 0
    image_id: str = ""
    """``registry/repository@digest`` of the image it runs from (empty: none pulled)."""


def container_status(view: ContainerView, image: str) -> dict[str, Any]:
    """One entry of ``containerStatuses`` (or ``initContainerStatuses``)."""
    last: dict[str, Any] = {}
    if view.state is State.RUNNING:
        state: dict[str, Any] = {"running": {"startedAt": view.started_at}}
        if view.exit:
            last = {"terminated": dict(view.exit)}
    elif view.state is State.TERMINATED:
        state = {"terminated": dict(view.exit or {})}
        if view.previous_exit:
            last = {"terminated": dict(view.previous_exit)}
    else:
        state = {
            "waiting": {
                "reason": view.reason,
                **({"message": view.message} if view.message else {}),
            }
        }
        if view.exit:
            last = {"terminated": dict(view.exit)}
    return {
        "name": view.name,
        "image": image,
        "imageID": view.image_id,
        "ready": view.ready,
        "started": view.started,
        "restartCount": view.restarts,
        "state": state,
        "lastState": last,
    }


def _names(views: Sequence[ContainerView]) -> str:
    return "[" + " ".join(v.name for v in views) + "]"


def conditions(
    *,
    init: Sequence[ContainerView],
    sidecars: Sequence[ContainerView],
    containers: Sequence[ContainerView],
    initialized: bool,
    final: str | None,
    gates: Sequence[str],
    previous: Sequence[Mapping[str, Any]],
    now: str,
) -> list[dict[str, Any]]:
    """``PodReadyToStartContainers``, ``Initialized``, ``ContainersReady`` and ``Ready``.

    ``init`` are the init containers that must complete, ``sidecars`` those that keep
    running; ``initialized`` whether they did (it stays so when a sidecar restarts later);
    ``gates`` the pod's readiness gate condition types, read from ``previous`` (the pod's
    conditions now, which also keep each ``lastTransitionTime`` while a status stays). A pod
    with a ``final`` phase is not ready, with reason ``PodCompleted`` or ``PodFailed``.
    """
    before = {str(c.get("type")): c for c in previous}

    def condition(kind: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
        status = "True" if ok else "False"
        known = before.get(kind) or {}
        since = known.get("lastTransitionTime") if known.get("status") == status else None
        # The status is written as a strategic merge patch, where a condition's fields merge
        # into the old ones: None removes a reason or message that no longer holds.
        return {
            "type": kind,
            "status": status,
            "lastTransitionTime": since or now,
            "reason": None if ok else reason,
            "message": None if ok or not message else message,
        }

    incomplete = [
        v for v in init if v.state is not State.TERMINATED or (v.exit or {}).get("exitCode") != 0
    ] + [v for v in sidecars if not v.started]
    init_condition = condition(
        "Initialized",
        initialized,
        "ContainersNotInitialized",
        f"containers with incomplete status: {_names(incomplete)}",
    )
    if final is not None:
        reason = "PodCompleted" if final == "Succeeded" else "PodFailed"
        return [
            condition("PodReadyToStartContainers", True),
            init_condition,
            condition("ContainersReady", False, reason),
            condition("Ready", False, reason),
        ]
    unready = [v for v in [*sidecars, *containers] if not v.ready]
    gates_down = [g for g in gates if (before.get(g) or {}).get("status") != "True"]
    message = f"containers with unready status: {_names(unready)}"
    if unready:
        ready = condition("Ready", False, "ContainersNotReady", message)
    elif gates_down:
        gate_message = f"corresponding condition of pod readiness gate {gates_down} is not True"
        ready = condition("Ready", False, "ReadinessGatesNotReady", gate_message)
    else:
        ready = condition("Ready", True)
    return [
        condition("PodReadyToStartContainers", True),
        init_condition,
        condition("ContainersReady", not unready, "ContainersNotReady", message),
        ready,
    ]


def phase(*, initialized: bool, containers: Sequence[ContainerView], final: str | None) -> str:
    """The pod's phase.

    ``Pending`` until the init containers are done and a container has started, then
    ``Running``; ``final`` (``Succeeded``/``Failed``) once no container runs again.
    """
    if final is not None:
        return final
    if initialized and any(v.state is State.RUNNING or v.exit for v in containers):
        return "Running"
    return "Pending"


NEVER_STARTED = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}
"""The ``terminated`` record the kubelet gives a container that never ran in a pod it ends."""


def never_started(
    pod_spec: Mapping[str, Any],
    *,
    images: Mapping[str, str],
    previous: Sequence[Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    """The last status of a deleted pod none of whose containers ran: ``Failed``.

    A kubelet ends every pod it stops in a terminal phase before it is removed (the
    ResourceClaim controller frees a pod's claims only then), a pod it never started too.
    As its ``TerminatePod`` does: init containers that never started stay waiting, and the
    containers are ``terminated`` with :data:`NEVER_STARTED` only once the pod counts as
    initialized, which a pod without init containers does.
    """
    init = [
        ContainerView(c["name"], State.WAITING, reason="PodInitializing")
        for c in pod_spec.get("initContainers") or []
    ]
    initialized = not init
    unknown = {**NEVER_STARTED, "finishedAt": now}
    containers = [
        ContainerView(c["name"], State.TERMINATED, exit=unknown)
        if initialized
        else ContainerView(c["name"], State.WAITING, reason="PodInitializing")
        for c in pod_spec.get("containers") or []
    ]
    failed = conditions(
        init=init, sidecars=[], containers=containers, initialized=initialized, final="Failed",
        gates=[], previous=previous, now=now,
    )  # fmt: skip
    return _pod_status("Failed", failed, init=init, containers=containers, images=images)


def _pod_status(
    phase_now: str,
    pod_conditions: list[dict[str, Any]],
    *,
    init: Sequence[ContainerView],
    containers: Sequence[ContainerView],
    images: Mapping[str, str],
) -> dict[str, Any]:
    """A pod status body of a pod the kubelet ran no container of (yet)."""
    body: dict[str, Any] = {
        "phase": phase_now,
        "conditions": pod_conditions,
        "containerStatuses": [container_status(v, images.get(v.name, "")) for v in containers],
    }
    if init:
        body["initContainerStatuses"] = [container_status(v, images.get(v.name, "")) for v in init]
    return body


def waiting(
    pod_spec: Mapping[str, Any],
    *,
    reasons: Mapping[str, tuple[str, str]],
    images: Mapping[str, str],
    previous: Sequence[Mapping[str, Any]],
    now: str,
) -> dict[str, Any]:
    """The status of a pod none of whose containers has started yet: ``Pending``.

    ``reasons``: container name → ``(reason, message)`` of what it waits for (its image:
    ``ErrImagePull``, ``ImagePullBackOff``, ...); the others wait ``PodInitializing`` (or
    ``ContainerCreating`` in a pod without init containers).
    """
    specs = pod_spec.get("initContainers") or []
    idle = "PodInitializing" if specs else "ContainerCreating"

    def view(name: str, default: str) -> ContainerView:
        reason, message = reasons.get(name, (default, ""))
        return ContainerView(name, State.WAITING, reason=reason, message=message)

    init = [view(c["name"], "PodInitializing") for c in specs]
    containers = [view(c["name"], idle) for c in pod_spec.get("containers") or []]
    sidecars = [v for v, c in zip(init, specs, strict=True) if c.get("restartPolicy") == "Always"]
    must_complete = [v for v in init if v not in sidecars]
    pending = conditions(
        init=must_complete, sidecars=sidecars, containers=containers, initialized=not init,
        final=None, gates=[], previous=previous, now=now,
    )  # fmt: skip
    return _pod_status("Pending", pending, init=init, containers=containers, images=images)
