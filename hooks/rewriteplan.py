"""Decisions of the storage-version rewrite.

The checkpoint, where a rerun resumes, and the built-in ``StorageVersionMigration`` objects.
Pure; :mod:`computedomains.hooks.rewrite` acts.

The checkpoint is written after every completed page: every object listed before the page's
continue token has been written back. A rerun of the same migration starts from that token;
when the token has expired (the API server compacted past it, 410), it lists from the start
and skips what sorts at or before the last completed object (lists come in key order).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import constants

CHECKPOINT_LABEL = f"{constants.OWN_PREFIX}/migration-checkpoint"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """How far the paged rewrite of one migration got."""

    migration: str
    done: tuple[str, ...] = ()
    """CRDs whose objects were all written back."""
    resource: str = ""
    """The CRD in progress ("" between CRDs)."""
    continue_token: str = ""
    """Token of the next page of ``resource`` ("" when no page completed yet)."""
    last: str = ""
    """Key (``namespace/name``) of the last object completed in ``resource``."""
    count: int = 0
    """Objects of ``resource`` written back so far."""

    def to_data(self) -> dict[str, str]:
        """The ConfigMap ``data``."""
        return {
            "migration": self.migration,
            "done": json.dumps(list(self.done)),
            "resource": self.resource,
            "continue": self.continue_token,
            "last": self.last,
            "count": str(self.count),
        }

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> Checkpoint | None:
        """The checkpoint in ConfigMap ``data``; None when there is none or it is unreadable."""
        if not data or "migration" not in data:
            return None
        try:
            done = json.loads(data.get("done") or "[]")
            return cls(
                migration=data["migration"],
                done=tuple(str(d) for d in done),
                resource=data.get("resource", ""),
                continue_token=data.get("continue", ""),
                last=data.get("last", ""),
                count=int(data.get("count") or 0),
            )
        except (TypeError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class Start:
    """Where the rewrite of one CRD starts."""

    skip: bool
    """All its objects were written back by an earlier run of this migration."""
    continue_token: str = ""
    after: str = ""
    """Objects at or before this key were written back already (used without a token)."""
    count: int = 0

    @property
    def resumed(self) -> bool:
        """An earlier run got part of the way."""
        return bool(self.continue_token or self.after)


def start(checkpoint: Checkpoint | None, *, migration: str, resource: str) -> Start:
    """Where to start ``resource``, given the checkpoint (of any migration, or none)."""
    if checkpoint is None or checkpoint.migration != migration:
        return Start(skip=False)
    if resource in checkpoint.done:
        return Start(skip=True, count=0)
    if checkpoint.resource == resource:
        return Start(
            skip=False,
            continue_token=checkpoint.continue_token,
            after=checkpoint.last,
            count=checkpoint.count,
        )
    return Start(skip=False)


def after_page(
    checkpoint: Checkpoint, *, resource: str, continue_token: str, last: str, written: int
) -> Checkpoint:
    """The checkpoint once a page of ``resource`` is written back."""
    same = checkpoint.resource == resource
    return dataclasses.replace(
        checkpoint,
        resource=resource,
        continue_token=continue_token,
        last=last or (checkpoint.last if same else ""),
        count=(checkpoint.count if same else 0) + written,
    )


def finished(checkpoint: Checkpoint, *, resource: str) -> Checkpoint:
    """The checkpoint once every object of ``resource`` is written back."""
    done = checkpoint.done if resource in checkpoint.done else (*checkpoint.done, resource)
    return Checkpoint(migration=checkpoint.migration, done=done)


def remaining(keys: Sequence[str], after: str) -> list[int]:
    """Indexes of ``keys`` still to write when everything up to ``after`` is done."""
    return [i for i, key in enumerate(keys) if not after or key > after]


# -- the built-in StorageVersionMigration -------------------------------------------------

SVM_GROUP = "storagemigration.k8s.io"
SVM_PLURAL = "storageversionmigrations"
SVM_VERSIONS = ("v1beta1", "v1alpha1")
"""Preferred first: beta (Kubernetes 1.35+, spec.resource without a version), then alpha."""


class Phase(enum.StrEnum):
    """Where one StorageVersionMigration stands."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


def pick_svm_version(served: Sequence[str]) -> str | None:
    """The StorageVersionMigration version to use among those discovery serves."""
    return next((v for v in SVM_VERSIONS if v in served), None)


def svm_name(migration: str, plural: str, group: str) -> str:
    """A name per migration and resource: a rerun finds its own object again."""
    return f"computedomains-{migration}-{plural}.{group}"[:253]


def svm_body(
    *, name: str, api_version: str, group: str, plural: str, storage_version: str
) -> dict[str, Any]:
    """The StorageVersionMigration of one resource."""
    resource: dict[str, str] = {"group": group, "resource": plural}
    if api_version == "v1alpha1":
        resource["version"] = storage_version
    return {
        "apiVersion": f"{SVM_GROUP}/{api_version}",
        "kind": "StorageVersionMigration",
        "metadata": {"name": name},
        "spec": {"resource": resource},
    }


def svm_phase(obj: Mapping[str, Any]) -> tuple[Phase, str]:
    """The migration's phase and, when it failed, why."""
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
    for phase in (Phase.FAILED, Phase.SUCCEEDED, Phase.RUNNING):
        condition = conditions.get(phase.value)
        if condition is not None and condition.get("status") == "True":
            return phase, str(condition.get("message") or condition.get("reason") or "")
    return Phase.PENDING, ""
