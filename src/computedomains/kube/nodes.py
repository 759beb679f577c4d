"""Reading Node objects, and the label, condition and taint edits components make on them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from computedomains import rfc3339
from computedomains.api import resources
from computedomains.kube import client

_CONFLICT_RETRIES = 5


def path(name: str) -> str:
    """The API path of node ``name``."""
    return resources.NODES.path(name)


def is_ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def create(api: client.Client, body: dict[str, Any]) -> None:
    """Create a Node from a manifest (simulated nodes register this way, like a kubelet)."""
    api.create(resources.NODES.path(), body)


def ready_names(api: client.Client, *, timeout: float = 30) -> tuple[set[str], int]:
    """Names of the Ready nodes, and how many nodes there are in all."""
    items = api.get(resources.NODES.path(), timeout=timeout).get("items", [])
    return {n["metadata"]["name"] for n in items if is_ready(n)}, len(items)


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
    uid: str = ""

    def condition(self, condition_type: str) -> Condition | None:
        """The condition of that type, or None."""
        return next((c for c in self.conditions if c.type == condition_type), None)


def _now() -> str:
    return rfc3339.stamp()


def get(api: client.Client, name: str) -> NodeView:
    """Node ``name`` as a :class:`NodeView`."""
    node = api.get(path(name))
    return NodeView(
        name=name,
        uid=str(node["metadata"].get("uid", "")),
        labels=dict(node["metadata"].get("labels") or {}),
        conditions=tuple(
            Condition(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
            for c in node.get("status", {}).get("conditions") or []
        ),
        taints=tuple(
            Taint(t["key"], t["effect"], t.get("value", ""))
            for t in node.get("spec", {}).get("taints") or []
        ),
    )


def patch_labels(api: client.Client, name: str, labels: Mapping[str, str | None]) -> None:
    """Set the given labels on node ``name``; a None value removes that label."""
    api.patch(path(name), {"metadata": {"labels": dict(labels)}})


def set_label_if(
    api: client.Client,
    name: str,
    key: str,
    *,
    expected: str,
    value: str,
    resource_version: str = "",
) -> bool:
    """Set label ``key`` of node ``name`` to ``value`` ("": remove) while it reads ``expected``.

    ``expected`` "" means absent. The patch carries the resourceVersion the check was made on
    (``resource_version``, a cached one, saves the first read), so a label another writer
    changed meanwhile is left alone; a conflict reads the node again. Returns True when the
    label was written, False when it (or the node) was gone or changed.
    """
    version = resource_version
    for attempt in range(_CONFLICT_RETRIES):
        if not version:
            node = api.find(path(name))
            if node is None:
                return False
            if (node["metadata"].get("labels") or {}).get(key, "") != expected:
                return False
            version = node["metadata"]["resourceVersion"]
        body = {"metadata": {"resourceVersion": version, "labels": {key: value or None}}}
        try:
            api.patch(path(name), body)
            return True
        except client.ApiError as exc:
            if exc.failure is client.Failure.NOT_FOUND:
                return False
            if exc.failure is not client.Failure.CONFLICT or attempt == _CONFLICT_RETRIES - 1:
                raise
            version = ""
    return False


def set_condition(
    api: client.Client, name: str, condition_type: str, status: str, *, reason: str, message: str
) -> None:
    """Set one condition through ``nodes/status``, leaving the others (kubelet's) alone.

    The transition time moves only when the status changes, as for the kubelet's conditions.
    """
    node = api.get(path(name))
    current = next(
        (
            c
            for c in node.get("status", {}).get("conditions") or []
            if c.get("type") == condition_type
        ),
        None,
    )
    now = _now()
    transition = now
    if (
        current is not None
        and current.get("status") == status
        and current.get("lastTransitionTime")
    ):
        transition = current["lastTransitionTime"]
    condition = {"type": condition_type, "status": status, "reason": reason, "message": message,
                 "lastHeartbeatTime": now, "lastTransitionTime": transition}  # fmt: skip
    # Conditions merge by type in a strategic merge patch, so no other condition is touched.
    api.patch(f"{path(name)}/status", {"status": {"conditions": [condition]}}, strategic=True)


def remove_condition(api: client.Client, name: str, condition_type: str) -> None:
    """Remove one condition from node ``name`` (a no-op when it is absent)."""
    body = {"status": {"conditions": [{"type": condition_type, "$patch": "delete"}]}}
    api.patch(f"{path(name)}/status", body, strategic=True)


def set_taint(
    api: client.Client, name: str, key: str, effect: str, *, present: bool, value: str = ""
) -> None:
    """Add (``present``) or remove the taint ``key:effect`` on node ``name``.

    Node taints are replaced as a whole list, and the node lifecycle controller edits the same
    list, so each write carries the resourceVersion it was computed from and is redone on a
    conflict. Other taints are written back unchanged, ``timeAdded`` included.
    """
    for attempt in range(_CONFLICT_RETRIES):
        node = api.get(path(name))
        taints = node.get("spec", {}).get("taints") or []
        others = [t for t in taints if not (t.get("key") == key and t.get("effect") == effect)]
        if present == (len(others) != len(taints)):
            return  # already as wanted
        if present:
            others.append({"key": key, "effect": effect, **({"value": value} if value else {})})
        body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": others}}  # fmt: skip
        try:
            api.patch(path(name), body)
            return
        except client.ApiError as exc:
            if exc.failure is not client.Failure.CONFLICT or attempt == _CONFLICT_RETRIES - 1:
                raise
