"""Channel claims that can never be prepared, told at once: pure.

The kubelet plugin refuses such a claim at prepare, naming what is wrong. But a pod reaches
prepare only once the scheduler has placed it (with binding conditions, after its next poll)
and a claim written by hand may have no pod yet: the controller sees every claim as it is
made, so it says the same on the claim, and on the pods it is for, within a second.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from computedomains.api import claimrefusals, models, placement
from computedomains.api.schema import ValidationError
from computedomains.kube import events


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why the claim can never be prepared: an Event's reason and message."""

    reason: str
    message: str


def check(claim: Mapping[str, Any], *, namespace_of: Callable[[str], str | None]) -> Problem | None:
    """What is wrong with ``claim`` for good; None when nothing is (or it is no channel claim).

    ``namespace_of`` gives the namespace of a known domain by UID (None: no such domain).
    """
    if not placement.asks_for_a_channel(claim):
        return None
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    where = f"claim {namespace}/{meta.get('name', '')}"
    ours = placement.opaque_configs(claim)
    if not ours:
        if not (claim.get("status") or {}).get("allocation"):
            return None  # its allocation may still bring one (a DeviceClass's config, say)
        return Problem(claimrefusals.MISSING_CONFIG, claimrefusals.missing_config(where))
    for opaque in ours:
        try:
            parsed = models.parse_opaque_config(opaque.get("parameters") or {})
        except ValidationError as exc:
            return Problem(claimrefusals.INVALID_CONFIG, claimrefusals.invalid_config(where, exc))
        if isinstance(parsed, models.ChannelConfig) and namespace_of(parsed.domain_id) != namespace:
            return Problem(
                claimrefusals.DOMAIN_NOT_FOUND,
                claimrefusals.domain_not_found(where, parsed.domain_id, namespace),
            )
    return None


def audience(claim: Mapping[str, Any]) -> list[events.ObjectRef]:
    """Who is told: the claim, the pod it was made for and the pods it is reserved for."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    refs = [
        events.ObjectRef(
            "ResourceClaim", str(meta.get("name", "")), namespace, str(meta.get("uid", "")),
            "resource.k8s.io/v1",
        )
    ]  # fmt: skip
    pods = {
        (str(o.get("name", "")), str(o.get("uid", "")))
        for o in meta.get("ownerReferences") or []
        if o.get("kind") == "Pod"
    }
    pods |= {
        (str(r.get("name", "")), str(r.get("uid", "")))
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if r.get("resource") == "pods"
    }
    return refs + [events.ObjectRef("Pod", name, namespace, uid) for name, uid in sorted(pods)]
