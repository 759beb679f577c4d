"""Rebuild the node's claims when the checkpoint is lost: from the CDI specs and the API.

A corrupt, unreadable or newer-version checkpoint must not cost the node its running claims,
so before anything else runs (garbage collection above all) the plugin asks what the node
and the API server still know:

- each CDI spec it wrote names its claim, domain and device type (``cdi.SpecInfo``): a spec
  whose claim is still allocated here is a completed prepare;
- the claims allocated to this node: a channel claim of the domain in the node's label (the
  controller's copy of its membership record) without a spec may be being prepared, or be
  complete on a node without an NVLink fabric, where prepare writes no spec: it is rebuilt as
  started, so it holds the node and is prepared (and checked) again when the kubelet asks.

Specs of claims the API no longer shows allocated here belong to nobody and are removed.
:func:`plan` decides all of this from the gathered facts alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from computedomains.kubeletplugin import cdi, checkpoint, claims, devices, errors


@dataclasses.dataclass(frozen=True)
class Allocated:
    """A claim the API server shows allocated devices of this driver on this node."""

    view: claims.ClaimView
    domain_uid: str
    device_type: devices.DeviceType | None


@dataclasses.dataclass(frozen=True)
class Plan:
    """The rebuilt claims, and the specs nobody owns."""

    entries: dict[str, checkpoint.ClaimEntry]
    stale_specs: tuple[str, ...] = ()
    """Claim UIDs whose spec is to be removed."""

    def summary(self) -> str:
        """One line for the log and the Node Event."""
        states = [e.state for e in self.entries.values()]
        done = states.count(checkpoint.ClaimState.COMPLETED)
        return (
            f"rebuilt {len(self.entries)} claims from CDI specs and the API "
            f"({done} prepared, {len(states) - done} being prepared), "
            f"removed {len(self.stale_specs)} stale CDI specs"
        )


def allocated_here(items: Iterable[dict[str, Any]], *, node: str) -> list[Allocated]:
    """The claims among ``items`` (raw ResourceClaims) allocated to ``node``."""
    found = []
    for claim in items:
        if not claims.allocated_to(claim, node):
            continue
        try:
            view = claims.view(claim, expected_uid=str(claim["metadata"]["uid"]))
        except errors.PrepareError:
            continue  # nothing of ours to prepare, so nothing prepared either
        types = {devices.device_type(d.device) for d in view.devices}
        device_type = types.pop() if len(types) == 1 else None
        found.append(Allocated(view, claims.domain_uid(view), device_type))
    return found


def plan(
    *,
    specs: Sequence[cdi.SpecInfo],
    allocated: Sequence[Allocated],
    node_label: str | None,
) -> Plan:
    """The node's claims as the specs, the allocated claims and the node label tell them."""
    by_uid = {s.claim_uid: s for s in specs}
    entries = {}
    for claim in allocated:
        spec = by_uid.get(claim.view.uid)
        if spec is not None:
            entries[claim.view.uid] = _entry(claim, spec, state=checkpoint.ClaimState.COMPLETED)
        elif (
            claim.device_type is devices.DeviceType.CHANNEL
            and node_label
            and claim.domain_uid == node_label
        ):
            # Being prepared, or prepared on a node without a fabric (no spec there): as
            # started it holds the node, and the kubelet's next call prepares it again, checks
            # and all (the label is set once the controller records the node, before prepare).
            entries[claim.view.uid] = _entry(claim, None, state=checkpoint.ClaimState.STARTED)
    stale = tuple(sorted(uid for uid in by_uid if uid not in entries))
    return Plan(entries, stale)


def _entry(
    claim: Allocated, spec: cdi.SpecInfo | None, *, state: checkpoint.ClaimState
) -> checkpoint.ClaimEntry:
    view = claim.view
    prepared: tuple[checkpoint.PreparedDevice, ...] = ()
    if state is checkpoint.ClaimState.COMPLETED:
        injected = set(spec.devices) if spec is not None else set()
        prepared = tuple(
            checkpoint.PreparedDevice(
                (d.request,),
                d.pool,
                d.device,
                (cdi.device_id(view.uid, d.device),) if d.device in injected else (),
            )
            for d in view.devices
        )
    return checkpoint.ClaimEntry(
        uid=view.uid,
        namespace=view.namespace,
        name=view.name,
        state=state,
        domain_uid=spec.domain_uid if spec is not None else claim.domain_uid,
        device_type=spec.device_type if spec is not None else claim.device_type,
        allocation=view.allocation_digest,
        devices=prepared,
    )
