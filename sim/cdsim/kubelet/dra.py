"""The kubelet's DRA decisions, pure: what to prepare, what to accept, what to unprepare.

The rules are the kubelet's: every claim of the pod must exist, be allocated and reserve the
pod, and a generated claim must be owned by it; one ``NodePrepareResources`` per pod per
driver carries the claims that driver has not prepared yet; a per-claim error, a missing
entry or an unexpected UID fails the call; a claim is unprepared once no active pod on the
node uses it. Also here: which CDI IDs each container gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from computedomains.kube import wire

PREPARED_ANNOTATION = "compute-domains.sim/dra-prepared"
"""Set to ``"true"`` on a pod once its claims are prepared; kwok's ready stage waits for it."""
FAILED_REASON = "FailedPrepareDynamicResources"
_FINISHED = ("Succeeded", "Failed")


@dataclasses.dataclass(frozen=True, order=True)
class ClaimRef:
    """A ResourceClaim as the DRA API names it."""

    namespace: str
    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class Device:
    """One prepared device, as a plugin reported it."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]

    def to_wire(self) -> dict[str, Any]:
        """JSON form (the kubelet API's field names)."""
        return {
            "requestNames": list(self.request_names),
            "poolName": self.pool,
            "deviceName": self.device,
            "cdiDeviceIDs": list(self.cdi_ids),
        }


@dataclasses.dataclass(frozen=True)
class ClaimResult:
    """One claim's entry in a NodePrepareResources response."""

    devices: tuple[Device, ...] = ()
    error: str = ""


@dataclasses.dataclass(frozen=True)
class ClaimView:
    """What the kubelet reads from a ResourceClaim."""

    ref: ClaimRef
    drivers: tuple[str, ...]
    """Drivers of the allocated devices, sorted; empty when not allocated."""
    allocated: bool
    reserved_for: frozenset[str]
    """UIDs of the pods in ``status.reservedFor``."""
    owners: frozenset[str]


def claim_view(claim: wire.ResourceClaim) -> ClaimView:
    """Read a ResourceClaim's allocation, reservations and owners."""
    meta, status = claim.get("metadata", {}), claim.get("status", {})
    allocation = status.get("allocation")
    results = (allocation or {}).get("devices", {}).get("results", [])
    return ClaimView(
        ref=ClaimRef(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")),
        drivers=tuple(sorted({r.get("driver", "") for r in results})),
        allocated=allocation is not None,
        reserved_for=frozenset(
            r.get("uid", "") for r in status.get("reservedFor", []) if r.get("resource") == "pods"
        ),
        owners=frozenset(o.get("uid", "") for o in meta.get("ownerReferences", [])),
    )


@dataclasses.dataclass(frozen=True)
class PodClaim:
    """One entry of ``pod.spec.resourceClaims`` and the ResourceClaim behind it."""

    pod_claim: str
    claim_name: str | None
    """None while the controller has not created the claim from the template yet."""
    generated: bool


def pod_claims(pod: wire.Pod) -> tuple[PodClaim, ...]:
    """The pod's claims; template entries that need no claim (status without a name) drop out."""
    statuses = {
        s.get("name", ""): s for s in pod.get("status", {}).get("resourceClaimStatuses", [])
    }
    out: list[PodClaim] = []
    for entry in pod.get("spec", {}).get("resourceClaims", []):
        name = entry.get("name", "")
        if "resourceClaimName" in entry:
            out.append(PodClaim(name, entry["resourceClaimName"], generated=False))
        elif name not in statuses:
            out.append(PodClaim(name, None, generated=True))
        elif statuses[name].get("resourceClaimName"):
            out.append(PodClaim(name, statuses[name]["resourceClaimName"], generated=True))
    return tuple(out)


def is_active(pod: wire.Pod) -> bool:
    """True while the pod's containers should run: not terminating, not finished."""
    return "deletionTimestamp" not in pod.get("metadata", {}) and (
        pod.get("status", {}).get("phase") not in _FINISHED
    )


@dataclasses.dataclass(frozen=True)
class PreparePlan:
    """What one prepare attempt for a pod does."""

    claims: Mapping[str, ClaimRef]
    """Pod claim name → its ResourceClaim (when found)."""
    calls: Mapping[str, Sequence[ClaimRef]]
    """Driver → the claims to send it (not prepared by that driver yet)."""
    errors: Sequence[str]
    """Why the pod cannot be prepared now; no calls are made when there is any."""

    @property
    def done(self) -> bool:
        """Every claim is prepared already."""
        return not self.calls and not self.errors


def _claim_errors(pod_uid: str, entry: PodClaim, view: ClaimView | None, ns: str) -> list[str]:
    if entry.claim_name is None:
        return [f"ResourceClaim for pod claim {entry.pod_claim!r} has not been created yet"]
    label = f"ResourceClaim {ns}/{entry.claim_name}"
    if view is None:
        return [f"{label} not found"]
    if entry.generated and pod_uid not in view.owners:
        return [f"{label} was not created for this pod"]
    if not view.allocated:
        return [f"{label} is not allocated"]
    if pod_uid not in view.reserved_for:
        return [f"pod is not in the reservedFor list of {label}"]
    return []


def plan_prepare(
    pod_uid: str,
    namespace: str,
    entries: Sequence[PodClaim],
    claims: Mapping[str, ClaimView | None],
    *,
    prepared: Mapping[str, Collection[str]],
    registered: Collection[str],
) -> PreparePlan:
    """Decide one prepare attempt.

    ``claims`` maps claim names to what was read (None: not found); ``prepared`` maps claim
    UIDs to the drivers that prepared them; ``registered`` names the drivers with a plugin.
    """
    refs: dict[str, ClaimRef] = {}
    calls: dict[str, list[ClaimRef]] = {}
    errors: list[str] = []
    for entry in entries:
        view = claims.get(entry.claim_name) if entry.claim_name else None
        problems = _claim_errors(pod_uid, entry, view, namespace)
        if problems or view is None:
            errors += problems
            continue
        refs[entry.pod_claim] = view.ref
        for driver in view.drivers:
            if driver in prepared.get(view.ref.uid, ()):
                continue
            if driver not in registered:
                errors.append(f"DRA driver {driver} is not registered")
            else:
                calls.setdefault(driver, []).append(view.ref)
    if errors:
        return PreparePlan(refs, {}, list(dict.fromkeys(errors)))
    return PreparePlan(refs, {d: sorted(set(c)) for d, c in sorted(calls.items())}, [])


def check_prepare(
    driver: str, requested: Sequence[ClaimRef], results: Mapping[str, ClaimResult]
) -> tuple[dict[str, tuple[Device, ...]], list[str]]:
    """Prepared devices by claim UID, and errors; the kubelet's strictness on the answer.

    Unknown UIDs make the whole answer untrustworthy: nothing counts as prepared then.
    """
    wanted = {c.uid: c for c in requested}
    unexpected = sorted(set(results) - set(wanted))
    if unexpected:
        return {}, [f"NodePrepareResources of {driver} returned unexpected claim UIDs {unexpected}"]
    devices: dict[str, tuple[Device, ...]] = {}
    errors: list[str] = []
    for uid, claim in wanted.items():
        result = results.get(uid)
        if result is None:
            errors.append(
                f"NodePrepareResources of {driver} skipped ResourceClaim "
                f"{claim.namespace}/{claim.name}"
            )
        elif result.error:
            errors.append(
                f"NodePrepareResources of {driver} failed for ResourceClaim "
                f"{claim.namespace}/{claim.name}: {result.error}"
            )
        else:
            devices[uid] = result.devices
    return devices, errors


def check_unprepare(
    driver: str, requested: Sequence[ClaimRef], results: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """UIDs unprepared, and errors (per-claim errors, missing entries, unexpected UIDs)."""
    wanted = {c.uid: c for c in requested}
    unexpected = sorted(set(results) - set(wanted))
    if unexpected:
        return [], [
            f"NodeUnprepareResources of {driver} returned unexpected claim UIDs {unexpected}"
        ]
    done: list[str] = []
    errors: list[str] = []
    for uid, claim in wanted.items():
        label = f"ResourceClaim {claim.namespace}/{claim.name}"
        if uid not in results:
            errors.append(f"NodeUnprepareResources of {driver} skipped {label}")
        elif results[uid]:
            errors.append(f"NodeUnprepareResources of {driver} failed for {label}: {results[uid]}")
        else:
            done.append(uid)
    return done, errors


@dataclasses.dataclass
class PreparedClaim:
    """A claim prepared on this node: what each driver returned and which pods use it."""

    ref: ClaimRef
    devices: dict[str, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    pods: set[str] = dataclasses.field(default_factory=set)


def plan_unprepare(
    prepared: Mapping[str, PreparedClaim], active_pods: Collection[str]
) -> dict[str, list[ClaimRef]]:
    """Driver → claims to unprepare: those no active pod on the node uses any more.

    Works from the records alone, since the ResourceClaim may already be deleted.
    """
    calls: dict[str, list[ClaimRef]] = {}
    for record in prepared.values():
        if record.pods & set(active_pods):
            continue
        for driver in record.devices:
            calls.setdefault(driver, []).append(record.ref)
    return {d: sorted(c) for d, c in sorted(calls.items())}


def _devices(claim_uids: Iterable[str], prepared: Mapping[str, PreparedClaim]) -> list[Device]:
    return [
        device
        for uid in claim_uids
        if uid in prepared
        for _, devices in sorted(prepared[uid].devices.items())
        for device in devices
    ]


def pod_cdi_ids(claim_uids: Iterable[str], prepared: Mapping[str, PreparedClaim]) -> list[str]:
    """Every CDI ID of the pod's claims, in order, without repeats."""
    return list(dict.fromkeys(i for d in _devices(claim_uids, prepared) for i in d.cdi_ids))


def container_cdi_ids(
    container: wire.Container,
    claims: Mapping[str, ClaimRef],
    prepared: Mapping[str, PreparedClaim],
) -> list[str]:
    """The CDI IDs a container gets: devices of the claims (and requests) it lists.

    A device with no request names serves every request of its claim.
    """
    ids: list[str] = []
    for use in container.get("resources", {}).get("claims", []):
        ref = claims.get(use.get("name", ""))
        if ref is None:
            continue
        request = use.get("request")
        for device in _devices([ref.uid], prepared):
            if request is None or not device.request_names or request in device.request_names:
                ids += device.cdi_ids
    return list(dict.fromkeys(ids))
