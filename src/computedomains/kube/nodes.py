"""Reading Node objects, and the label, condition and taint edits components make on them."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException


def is_ready(node: client.V1Node) -> bool:
    """True when the node's Ready condition is True."""
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    """Create a Node from a manifest (simulated nodes register this way, like a kubelet)."""
    client.CoreV1Api(api).create_node(body)  # type: ignore[arg-type]  # dict bodies are accepted


def ready_names(api: client.ApiClient, *, timeout: float | None = None) -> tuple[set[str], int]:
    """Names of the Ready nodes, and how many nodes there are in all."""
    items = client.CoreV1Api(api).list_node(_request_timeout=timeout).items
    ready = {n.metadata.name for n in items if n.metadata and n.metadata.name and is_ready(n)}
    return ready, len(items)


@dataclasses.dataclass(frozen=True)
class Condition:
    """One node condition, as far as components compare them."""

    type: str
    status: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Taint:
    """One node taint."""

    key: str
    effect: str
    value: str = ""


@dataclasses.dataclass(frozen=True)
class NodeView:
    """The parts of a Node that components decide on: labels, conditions, taints."""

    name: str
    labels: Mapping[str, str]
    conditions: tuple[Condition, ...]
    taints: tuple[Taint, ...]

    def condition(self, condition_type: str) -> Condition | None:
        """The condition of that type, or None."""
        return next((c for c in self.conditions if c.type == condition_type), None)


_STRATEGIC = "application/strategic-merge-patch+json"
_CONFLICT_RETRIES = 5


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _timestamp(datetime.datetime.now(datetime.UTC))


def _taint_json(taint: client.V1Taint) -> dict[str, str]:
    # Written back unchanged, timeAdded included (the lifecycle controller's NoExecute taints
    # carry one that tolerationSeconds count from).
    body = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        body["value"] = taint.value
    if taint.time_added is not None:
        body["timeAdded"] = _timestamp(taint.time_added)
    return body


def get(api: client.ApiClient, name: str) -> NodeView:
    """Node ``name`` as a :class:`NodeView`."""
    node = client.CoreV1Api(api).read_node(name)
    conditions = (node.status.conditions if node.status else None) or []
    taints = (node.spec.taints if node.spec else None) or []
    return NodeView(
        name=name,
        labels=dict((node.metadata.labels if node.metadata else None) or {}),
        conditions=tuple(
            Condition(c.type, c.status, c.reason or "", c.message or "") for c in conditions
        ),
        taints=tuple(Taint(t.key, t.effect, t.value or "") for t in taints),
    )


def patch_labels(api: client.ApiClient, name: str, labels: Mapping[str, str | None]) -> None:
    """Set the given labels on node ``name``; a None value removes that label."""
    body = {"metadata": {"labels": dict(labels)}}
    client.CoreV1Api(api).patch_node(name, body, _content_type=_STRATEGIC)


def set_condition(
    api: client.ApiClient,
    name: str,
    condition_type: str,
    status: str,
    *,
    reason: str,
    message: str,
) -> None:
    """Set one condition through ``nodes/status``, leaving the others (kubelet's) alone.

    The transition time moves only when the status changes, as for the kubelet's conditions.
    """
    node = client.CoreV1Api(api).read_node(name)
    current = next(
        (
            c
            for c in (node.status.conditions if node.status else None) or []
            if c.type == condition_type
        ),
        None,
    )
    now = _now()
    transition = now
    if current is not None and current.status == status and current.last_transition_time:
        transition = _timestamp(current.last_transition_time)
    condition = {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }
    # Conditions merge by type in a strategic merge patch, so no other condition is touched.
    body = {"status": {"conditions": [condition]}}
    client.CoreV1Api(api).patch_node_status(name, body, _content_type=_STRATEGIC)


def remove_condition(api: client.ApiClient, name: str, condition_type: str) -> None:
    """Remove one condition from node ``name`` (a no-op when it is absent)."""
    body = {"status": {"conditions": [{"type": condition_type, "$patch": "delete"}]}}
    client.CoreV1Api(api).patch_node_status(name, body, _content_type=_STRATEGIC)


def set_taint(
    api: client.ApiClient, name: str, key: str, effect: str, *, present: bool, value: str = ""
) -> None:
    """Add (``present``) or remove the taint ``key:effect`` on node ``name``.

    Node taints are replaced as a whole list, and the node lifecycle controller edits the same
    list, so each write carries the resourceVersion it was computed from and is redone on a
    conflict.
    """
    core = client.CoreV1Api(api)
    for attempt in range(_CONFLICT_RETRIES):
        node = core.read_node(name)
        taints = (node.spec.taints if node.spec else None) or []
        others = [t for t in taints if not (t.key == key and t.effect == effect)]
        if present == (len(others) != len(taints)):
            return  # already as wanted
        wanted = [_taint_json(t) for t in others]
        if present:
            wanted.append({"key": key, "effect": effect, "value": value})
        version = node.metadata.resource_version if node.metadata else None
        body = {"metadata": {"resourceVersion": version}, "spec": {"taints": wanted}}
        try:
            core.patch_node(name, body, _content_type=_STRATEGIC)
            return
        except ApiException as exc:
            if exc.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                raise
