"""What restoring one saved object does to the live one. Pure; ``hooks restore`` acts.

Restore brings back what a migration could lose: missing objects are created, and an existing
object gets its saved ``spec``, labels and annotations (and status, through ``/status``, where
the CRD has that subresource). Anything else on the live object (finalizers, owner references,
fields the saved form does not have) stays, so a restore never fights the controller over
bookkeeping.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

_SERVER_FIELDS = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


class Action(enum.Enum):
    """What happens to one object."""

    CREATE = "create"
    """It is gone: created from the snapshot."""
    UPDATE = "update"
    """It differs from the snapshot: put back as saved."""
    UNCHANGED = "unchanged"
    """It is as saved: not written."""


@dataclasses.dataclass(frozen=True)
class Step:
    """The writes for one saved object."""

    action: Action
    body: Mapping[str, Any] | None
    """The create or PUT body (None when unchanged)."""
    status: Mapping[str, Any] | None
    """The saved status, to write through /status afterwards (None: nothing to write)."""


def creatable(saved: Mapping[str, Any]) -> dict[str, Any]:
    """The saved object without the fields the API server assigns."""
    body = copy.deepcopy(dict(saved))
    meta = body.get("metadata") or {}
    for field in _SERVER_FIELDS:
        meta.pop(field, None)
    body["metadata"] = meta
    return body


def step(
    saved: Mapping[str, Any], live: Mapping[str, Any] | None, *, status_subresource: bool
) -> Step:
    """The writes that make ``live`` (None: missing) match ``saved`` where restore cares."""
    status = saved.get("status") if status_subresource else None
    if live is None:
        return Step(Action.CREATE, creatable(saved), status)
    body = copy.deepcopy(dict(live))
    meta = body.setdefault("metadata", {})
    saved_meta = saved.get("metadata") or {}
    for field in ("labels", "annotations"):
        if saved_meta.get(field):
            meta[field] = copy.deepcopy(saved_meta[field])
        else:
            meta.pop(field, None)
    if "spec" in saved:
        body["spec"] = copy.deepcopy(saved["spec"])
    if not status_subresource and "status" in saved:
        body["status"] = copy.deepcopy(saved["status"])
    for field, value in saved.items():
        # Kinds without spec (a clique's top-level ``daemons``) restore their fields too.
        if field not in ("apiVersion", "kind", "metadata", "spec", "status"):
            body[field] = copy.deepcopy(value)
    changed = _comparable(body) != _comparable(live)
    status_changed = status is not None and status != live.get("status")
    return Step(
        Action.UPDATE if changed else Action.UNCHANGED,
        body if changed else None,
        status if status_changed else None,
    )


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}
