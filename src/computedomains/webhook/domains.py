"""What validation and placement need to know of each ComputeDomain (from the v1beta2 cache)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from computedomains.api import models


@dataclasses.dataclass(frozen=True)
class Domain:
    """One ComputeDomain, reduced to its identity, channel template and placement."""

    namespace: str
    name: str
    uid: str
    template: str
    """``spec.channel.resourceClaimTemplate.name`` (the same field in both versions)."""
    clique: models.CliquePlacement
    deleting: bool = False

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Domain:
        """Read a ComputeDomain object of either version (v1beta1 has no placement: None)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        raw = ((spec.get("placement") or {}).get("clique")) or models.CliquePlacement.NONE
        try:
            clique = models.CliquePlacement(raw)
        except ValueError:
            clique = models.CliquePlacement.NONE
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            template=template_of(obj),
            clique=clique,
            deleting=bool(meta.get("deletionTimestamp")),
        )


def template_of(obj: Mapping[str, Any]) -> str:
    """The channel ResourceClaimTemplate name a ComputeDomain object names ("" if none)."""
    channel = (obj.get("spec") or {}).get("channel") or {}
    return str((channel.get("resourceClaimTemplate") or {}).get("name") or "")


def in_namespace(domains: Iterable[Domain], namespace: str) -> list[Domain]:
    """The domains of ``namespace``, by name."""
    return sorted((d for d in domains if d.namespace == namespace), key=lambda d: d.name)
