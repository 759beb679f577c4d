"""Placement across ComputeDomains: how a node's hold by one domain reaches the scheduler.

A node serves one domain at a time, but its channel devices look free to the scheduler
whichever domain holds the node. Three DRA mechanisms make the hold visible (docs/placement.md):

- **Device taints** (Kubernetes 1.36, ``DRADeviceTaints``): the kubelet plugin taints the
  channel devices of a held node with the holding domain's UID; each domain's claim template
  tolerates exactly its own taint.
- **Binding conditions** (1.36, ``DRADeviceBindingConditions``): the channel devices of a
  node nobody holds carry a binding condition, so the scheduler waits in PreBind until the
  controller has decided who gets the node: the first domain is granted it, any other domain's
  claim gets the failure condition and the scheduler places it elsewhere.
- **An attribute and a selector** (every version, the fallback on 1.34/1.35 where the gates
  above are off): the devices carry the holder's UID as an attribute and each template selects
  only devices held by nobody or by its own domain.

The binding conditions cost the first pod of a domain on a free node one poll of the
scheduler (5 s). They settle a race that needs two domains placing at once, so while only one
domain places, the controller gives it **the turn**: every free node's channel devices are
tainted for that domain instead and carry no binding conditions, so its claims bind at once and
no other domain's claim can be allocated there. When a second domain starts placing, the turn
ends and free nodes carry binding conditions again (:data:`TURN_CONFIGMAP`).

This module is the contract between the plugin (publishes) and the controller (decides):
names, the one rule for who holds a node, and the parsing of claims both read.
"""
# size: placement's one contract (taint, binding conditions, holder, claims) for every reader

from __future__ import annotations

import dataclasses
import datetime
import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from computedomains import rfc3339
from computedomains.api import constants, models
from computedomains.api.schema import ValidationError

HOLD_TAINT_KEY = "resource.nvidia.com/computeDomain"
"""Device taint key on the channel devices of a held node (value: the domain UID). The same
string as the node label and the finalizer, but a contract of its own: the templates' tolerations
name it, so it changes only with them, whatever becomes of the other two."""
HOLD_TAINT_EFFECT = "NoSchedule"
"""Never ``NoExecute``: that would evict the holder's own running pods' claims."""
HOLDER_ATTRIBUTE = "computeDomain"
"""Device attribute (driver domain): the holding domain's UID, "" while nobody holds it."""
RESERVED_CONDITION = "ComputeDomainNodeReserved"
"""Binding condition: the controller reserved the node for the claim's domain."""
REFUSED_CONDITION = "ComputeDomainNodeRefused"
"""Binding failure condition: the node went to another domain (or the domain is gone)."""
TURN_CONFIGMAP = "compute-domains-placement-turn"
"""ConfigMap in the driver's namespace, written by the leading controller, read by every
kubelet plugin: ``data.domain`` is the UID of the domain whose turn it is ("" or absent: nobody's,
free nodes carry binding conditions), ``data.renewedAt`` when the leader last confirmed it."""
TURN_KEY = "domain"
TURN_RENEWED_KEY = "renewedAt"
TURN_RENEW_SECONDS = 10.0
"""The leader rewrites a turn this often (a stopped or disabled controller stops renewing)."""
TURN_STALE_SECONDS = 30.0
"""A turn not renewed for this long is nobody's: a leftover never keeps free nodes tainted."""

_CHANNEL_NAME = re.compile(r"channel-0(?:-s(\d+))?")


class RefusalReason(enum.StrEnum):
    """``reason`` of a :data:`REFUSED_CONDITION`."""

    NODE_IN_ANOTHER_DOMAIN = "NodeInAnotherComputeDomain"
    DOMAIN_NOT_FOUND = "ComputeDomainNotFound"


RESERVED_REASON = "NodeReserved"


def is_channel_device(name: str) -> bool:
    """True for the channel devices the plugin publishes (``channel-0``, ``channel-0-s<N>``)."""
    return _CHANNEL_NAME.fullmatch(name) is not None


def taint(domain_uid: str) -> dict[str, str]:
    """The device taint of a node held by ``domain_uid``."""
    return {"key": HOLD_TAINT_KEY, "value": domain_uid, "effect": HOLD_TAINT_EFFECT}


def toleration(domain_uid: str) -> dict[str, str]:
    """The toleration of ``domain_uid``'s claims: its own hold, nobody else's."""
    return {
        "key": HOLD_TAINT_KEY,
        "operator": "Equal",
        "value": domain_uid,
        "effect": HOLD_TAINT_EFFECT,
    }


def selector(domain_uid: str) -> str:
    """CEL: devices held by nobody or by ``domain_uid``.

    A slice without the attribute (a plugin from before it existed) still matches: an unknown
    attribute would be an error that aborts the whole allocation.
    """
    attrs = f'device.attributes["{constants.DRIVER_NAME}"]'
    return (
        f'!("{HOLDER_ATTRIBUTE}" in {attrs}) || {attrs}.{HOLDER_ATTRIBUTE} in ["", "{domain_uid}"]'
    )


@dataclasses.dataclass(frozen=True)
class ChannelAllocation:
    """A claim allocated channel devices of this driver on one node, as placement sees it."""

    uid: str
    namespace: str
    name: str
    domain_uid: str
    """From the claim's ComputeDomainChannelConfig ("" when it has none or a bad one)."""
    node: str
    """The pool of the devices, which is the node's name (one pool per node)."""
    devices: tuple[str, ...]
    allocated_at: str
    """``allocationTimestamp`` (or the claim's creation time, where an API server before 1.36
    drops the stamp): first come, first served."""
    pending: bool
    """The devices carry binding conditions and the controller has not answered yet."""
    granted: bool
    """The controller reserved the node for the claim's domain."""
    refused: bool
    """The controller refused the node to the claim (the scheduler will place it again)."""
    pods: tuple[tuple[str, str], ...] = ()
    """(name, uid) of the pods the claim is reserved for."""

    @property
    def unconditional(self) -> bool:
        """Allocated on devices without binding conditions: the pod binds without an answer.

        The node was tainted for the domain's turn, or binding conditions are off.
        """
        return not (self.pending or self.granted or self.refused)


def _conditions(status: Mapping[str, Any], pool: str, device: str) -> dict[str, str]:
    for entry in status.get("devices") or []:
        if (
            entry.get("driver") == constants.DRIVER_NAME
            and entry.get("pool") == pool
            and entry.get("device") == device
        ):
            return {str(c.get("type")): str(c.get("status")) for c in entry.get("conditions") or []}
    return {}


def _channel_request(claim: Mapping[str, Any]) -> str:
    """The request of the claim's channel ("" when none is known).

    Of its first device of this driver once allocated (what the kubelet plugin reads), before
    that its first request of the channel DeviceClass.
    """
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") == constants.DRIVER_NAME:
            return str(result.get("request", ""))
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if (request.get("exactly") or {}).get("deviceClassName") == constants.CHANNEL_DEVICE_CLASS:
            return str(request.get("name", ""))
    return ""


def channel_config(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The opaque config of this driver that applies to the claim's channel; None: none does.

    Picked as the kubelet plugin picks it (``claims.parameters_for``): the last entry naming
    the channel's request, or no request (DRA lists a class's configs before the claim's, and
    a later entry overrides). From the allocation once allocated, from the spec before (a claim
    not allocated yet has only those).
    """
    allocation = (claim.get("status") or {}).get("allocation") or {}
    holder = allocation if allocation else (claim.get("spec") or {})
    request = _channel_request(claim)
    chosen = None
    for entry in (holder.get("devices") or {}).get("config") or []:
        opaque = entry.get("opaque") or {}
        names = entry.get("requests") or []
        if opaque.get("driver") == constants.DRIVER_NAME and (
            not names or not request or request in names
        ):
            chosen = opaque
    return chosen


def domain_of(claim: Mapping[str, Any]) -> str:
    """The domain a channel claim is for: the one its :func:`channel_config` names.

    "" when no config applies, or the one that does is unreadable or no ChannelConfig (the
    plugin refuses such a claim).
    """
    opaque = channel_config(claim)
    if opaque is None:
        return ""
    try:
        parsed = models.parse_opaque_config(opaque.get("parameters") or {})
    except ValidationError:
        return ""
    return parsed.domain_id if isinstance(parsed, models.ChannelConfig) else ""


def parse_claim(claim: Mapping[str, Any]) -> ChannelAllocation | None:
    """The channel allocation of ``claim``; None when it holds no channel device of ours."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    results = [
        r
        for r in (allocation.get("devices") or {}).get("results") or []
        if r.get("driver") == constants.DRIVER_NAME and is_channel_device(str(r.get("device")))
    ]
    if not results:
        return None
    meta = claim.get("metadata") or {}
    pool = str(results[0].get("pool", ""))
    conditions = [_conditions(status, pool, str(r.get("device"))) for r in results]
    binding = any(r.get("bindingConditions") for r in results)
    granted = binding and all(c.get(RESERVED_CONDITION) == "True" for c in conditions)
    refused = any(c.get(REFUSED_CONDITION) == "True" for c in conditions)
    return ChannelAllocation(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        domain_uid=domain_of(claim),
        node=pool,
        devices=tuple(str(r.get("device")) for r in results),
        allocated_at=str(allocation.get("allocationTimestamp") or meta.get("creationTimestamp")),
        pending=binding and not granted and not refused,
        granted=granted,
        refused=refused,
        pods=tuple(
            (str(r.get("name")), str(r.get("uid")))
            for r in status.get("reservedFor") or []
            if r.get("resource") == "pods"
        ),
    )


def asks_for_a_channel(claim: Mapping[str, Any]) -> bool:
    """Whether ``claim`` is for a ComputeDomain channel.

    Its config names a domain, or a request names the channel DeviceClass (a claim with an
    unreadable config does only that).
    """
    if domain_of(claim):
        return True
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return any(
        (r.get("exactly") or {}).get("deviceClassName") == constants.CHANNEL_DEVICE_CLASS
        for r in requests
    )


def tolerates_own_hold(claim: Mapping[str, Any], domain_uid: str) -> bool:
    """Whether a request of ``claim`` tolerates ``domain_uid``'s hold.

    Its template's requests do; a claim written by hand, or one from a template an API server
    without device taints stored (it drops tolerations), may not.
    """
    wanted = toleration(domain_uid)
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return any(
        all(t.get(k) == v for k, v in wanted.items())
        for r in requests
        for t in (r.get("exactly") or {}).get("tolerations") or []
    )


def recorded_holder(
    node_name: str, cliques: Mapping[str, Mapping[str, Any]], *, legacy_label: str = ""
) -> str:
    """The domain the membership record names for ``node_name`` ("" none, or unclear).

    The record is the clique objects, which the controller alone writes: the domain whose
    object names the node a member (``CLIQUE_MEMBERS_ANNOTATION``) holds it. ``cliques`` are
    the clique objects of the node's clique by domain UID. When two name it, one is a domain
    the node just left whose object is not rewritten yet: wait for the next. Every reader asks
    this: the controller (:func:`holder`), the node's kubelet plugin (prepare, its slices) and
    its IMEX agent.

    Objects that name no members at all were written by a controller that keeps no record (a
    release before it, after a rollback; the incumbent's): there, and only there, the node's
    label ``legacy_label`` says, as it did then. So it does where the label's own domain has
    such an object, whatever other objects name: a rollback to 0.1.x leaves this release's
    OnDelete agents running beside a controller that keeps no record, and the members that
    objects written before still name are stale from then on.
    """
    if _label_says(cliques, legacy_label):
        return legacy_label
    found = [uid for uid, obj in cliques.items() if node_name in (models.clique_members(obj) or ())]
    return found[0] if len(found) == 1 else ""


def recorded_member(
    node_name: str, cliques: Mapping[str, Mapping[str, Any]], *, legacy_label: str = ""
) -> bool:
    """Whether the membership record puts ``node_name`` in some domain, whichever.

    :func:`recorded_holder`'s rule, arguments and fallback, except that two objects naming the
    node count: it is in one of them either way (it is moving from one domain to the other).
    """
    if _label_says(cliques, legacy_label):
        return bool(legacy_label)
    return any(node_name in (models.clique_members(obj) or ()) for obj in cliques.values())


def occupant(
    node_name: str,
    cliques: Mapping[str, Mapping[str, Any]],
    *,
    label: str = "",
    everywhere: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> str:
    """The domain that something disruptive on ``node_name`` would hurt ("" none).

    :func:`recorded_holder` (same arguments; ``label`` is the node's domain label), else the
    domain the label still names (its clean-up is not done yet), else the domain of any clique
    object, of whatever clique (``everywhere``: domain UID and object pairs), that still names
    the node a member or gives it a slot: a node keeps its slot until its agent confirmed IMEX
    stopped, and its clique label may have changed meanwhile. Stricter than who holds it:
    replacing an IMEX agent (roll-agents) waits for all of them to let go.
    """
    found = recorded_holder(node_name, cliques, legacy_label=label) or label
    if found:
        return found
    for uid, obj in [*cliques.items(), *everywhere]:
        slotted = any(d.get("nodeName") == node_name for d in obj.get("daemons") or ())
        if slotted or node_name in (models.clique_members(obj) or ()):
            return uid
    return ""


def _label_says(cliques: Mapping[str, Mapping[str, Any]], label: str) -> bool:
    """Whether the node's label, not the record, says (:func:`recorded_holder`).

    The objects name no members at all, or the label's domain has one that names none: a
    controller that keeps no record wrote them, and membership is the label's, as it was then.
    """
    unnamed = [models.clique_members(obj) is None for obj in cliques.values()]
    if cliques and all(unnamed):
        return True
    own = cliques.get(label) if label else None
    return own is not None and models.clique_members(own) is None


def holder(*, recorded: str, allocations: Iterable[ChannelAllocation]) -> str:
    """Who holds a node: the record's domain, else the first to be granted or to take it.

    "" when nobody does. ``recorded`` is :func:`recorded_holder` of the node; ``allocations``
    are the channel allocations on it: the controller's view, which sees every claim. An
    unconditional allocation took the node on its domain's turn (or with binding conditions
    off): its pod binds without asking, so no later claim can have it. An API server that
    does not stamp ``allocationTimestamp`` (before 1.36) leaves the claims' creation times to
    order them.
    """
    if recorded:
        return recorded
    taken = sorted(
        (a.allocated_at, a.uid, a.domain_uid)
        for a in allocations
        if (a.granted or a.unconditional) and a.domain_uid
    )
    return taken[0][2] if taken else ""


def turn_of(configmap: Mapping[str, Any] | None, *, now: datetime.datetime) -> str:
    """The domain whose turn :data:`TURN_CONFIGMAP` names at ``now``.

    "" when nobody's, when there is no such object, or when it was last renewed more than
    :data:`TURN_STALE_SECONDS` ago (or cannot say when).
    """
    data = (configmap or {}).get("data") or {}
    domain = str(data.get(TURN_KEY, ""))
    try:
        renewed = datetime.datetime.fromisoformat(str(data.get(TURN_RENEWED_KEY, "")))
    except ValueError:
        return ""
    if renewed.tzinfo is None or (now - renewed).total_seconds() > TURN_STALE_SECONDS:
        return ""
    return domain


def turn_configmap(domain_uid: str, *, namespace: str, now: datetime.datetime) -> dict[str, Any]:
    """The :data:`TURN_CONFIGMAP` giving the turn to ``domain_uid`` ("" nobody) at ``now``."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TURN_CONFIGMAP, "namespace": namespace},
        "data": {
            TURN_KEY: domain_uid,
            TURN_RENEWED_KEY: rfc3339.stamp(now),
        },
    }


def stranded(allocation: ChannelAllocation, *, holder: str) -> bool:
    """The claim holds a node (allocated, or granted) that another domain holds.

    Without binding conditions (Kubernetes before 1.36, or switched off) two domains' first pods
    can pick the same free node in the same moment; with them, a claim that took a node on the
    edge of a turn can meet one the binder granted. Either way the plugin refuses this claim for
    as long as the other domain holds the node.
    """
    return (
        bool(holder)
        and allocation.domain_uid != holder
        and not allocation.pending
        and not allocation.refused
    )


def answered_status(
    status: Mapping[str, Any],
    allocation: ChannelAllocation,
    *,
    granted: bool,
    reason: str,
    message: str,
    now: str,
) -> dict[str, Any]:
    """``status`` of the claim with the answer to ``allocation``'s binding conditions.

    Device entries of other drivers (and of our devices not in this allocation) are kept.
    """
    condition = {
        "type": RESERVED_CONDITION if granted else REFUSED_CONDITION,
        "status": "True",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now,
    }
    ours = {(constants.DRIVER_NAME, allocation.node, d) for d in allocation.devices}
    kept = [
        e
        for e in status.get("devices") or []
        if (e.get("driver"), e.get("pool"), e.get("device")) not in ours
    ]
    answered = [
        {
            "driver": constants.DRIVER_NAME,
            "pool": allocation.node,
            "device": device,
            "conditions": [condition],
        }
        for device in allocation.devices
    ]
    return {**status, "devices": kept + answered}
