"""Read what the plugin needs out of a ResourceClaim (raw JSON): pure, no I/O."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from computedomains.api import constants, models, schema
from computedomains.kubeletplugin import errors


@dataclasses.dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    uid: str
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of our driver."""

    request: str
    """The claim's request name (a sub-request suffix ``req/sub`` is stripped to ``req``)."""
    pool: str
    device: str


@dataclasses.dataclass(frozen=True)
class OpaqueConfig:
    """Opaque parameters for our driver and the requests they apply to (empty: all)."""

    requests: tuple[str, ...]
    parameters: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ClaimView:
    """The parts of an allocated claim that prepare uses."""

    uid: str
    namespace: str
    name: str
    devices: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...]
    """In precedence order: class configs, then claim configs; later entries win."""
    reserved_for: tuple[tuple[str, str], ...]
    """(pod name, pod uid) of the consumers, for Events."""
    allocation_digest: str


def view(claim: dict[str, Any], *, expected_uid: str) -> ClaimView:
    """Extract the claim's allocation for our driver; refuse claims we cannot prepare."""
    meta = claim.get("metadata", {})
    where = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != expected_uid:
        raise errors.Permanent(
            "ClaimReplaced",
            f"{where} has UID {meta.get('uid')}, the kubelet "
            f"asked for {expected_uid}: the claim was deleted and recreated",
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise errors.Permanent("ClaimNotAllocated", f"{where} is not allocated")
    results = allocation.get("devices", {}).get("results", [])
    devices = tuple(
        AllocatedDevice(r["request"].split("/", 1)[0], r["pool"], r["device"])
        for r in results
        if r.get("driver") == constants.DRIVER_NAME
    )
    if not devices:
        raise errors.Permanent(
            "NoDeviceOfThisDriver", f"{where} has no device allocated by {constants.DRIVER_NAME}"
        )
    configs = tuple(
        OpaqueConfig(
            tuple(r.split("/", 1)[0] for r in c.get("requests") or []),
            c["opaque"].get("parameters") or {},
        )
        for c in sorted(
            allocation.get("devices", {}).get("config", []) or [],
            key=lambda c: 0 if c.get("source") == "FromClass" else 1,
        )
        if (c.get("opaque") or {}).get("driver") == constants.DRIVER_NAME
    )
    reserved = tuple(
        (r["name"], r["uid"])
        for r in (claim.get("status") or {}).get("reservedFor", []) or []
        if r.get("resource") == "pods"
    )
    digest = hashlib.sha256(json.dumps(allocation, sort_keys=True).encode()).hexdigest()[:16]
    return ClaimView(
        uid=expected_uid,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        devices=devices,
        configs=configs,
        reserved_for=reserved,
        allocation_digest=digest,
    )


def parameters_for(claim: ClaimView, request: str) -> dict[str, Any] | None:
    """The opaque parameters that apply to ``request`` (the last matching entry wins)."""
    chosen = None
    for config in claim.configs:
        if not config.requests or request in config.requests:
            chosen = config.parameters
    return chosen


def allocated_to(claim: dict[str, Any], node: str) -> bool:
    """True when every device of our driver in ``claim``'s allocation is on ``node``."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = allocation.get("devices", {}).get("results", [])
    ours = [r for r in results if r.get("driver") == constants.DRIVER_NAME]
    return bool(ours) and all(r.get("pool") == node for r in ours)


def domain_uid(claim: ClaimView) -> str:
    """The ComputeDomain UID the claim's opaque config names ("" for none or a bad one).

    For a claim already prepared (rebuilding what the node holds); prepare itself refuses a
    bad config with its reason (``validate.plan``).
    """
    parameters = parameters_for(claim, claim.devices[0].request)
    if parameters is None:
        return ""
    try:
        config = models.parse_opaque_config(parameters)
    except schema.ValidationError:
        return ""
    return config.domain_id
