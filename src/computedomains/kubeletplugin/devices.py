"""What the plugin publishes: its node's channel and daemon devices as one ResourceSlice.

Channels are published as ``channel-0`` plus ``channel-0-s<N>`` "slots": every slot is IMEX
channel 0 (attribute ``id: 0``, so the incumbent's DeviceClass selects them), and each pod's
claim takes its own slot. That is how several pods of one ComputeDomain share a node, which
a single published channel device cannot allow.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from computedomains.api import constants, placement


class DeviceType(enum.StrEnum):
    """The ``type`` attribute of a published device."""

    CHANNEL = "channel"
    DAEMON = "daemon"


@dataclasses.dataclass(frozen=True)
class PublishedDevice:
    """One device in the node's ResourceSlice."""

    name: str
    type: DeviceType
    slot: int


DAEMON_DEVICE = "daemon-0"


def node_devices(*, slots: int, usable: bool) -> list[PublishedDevice]:
    """The devices to publish; none while the node's fabric is unusable."""
    if not usable:
        return []
    channels = [
        PublishedDevice("channel-0" if s == 0 else f"channel-0-s{s}", DeviceType.CHANNEL, s)
        for s in range(slots)
    ]
    return [*channels, PublishedDevice(DAEMON_DEVICE, DeviceType.DAEMON, 0)]


def device_type(name: str) -> DeviceType | None:
    """The type of a device this plugin publishes, by name (None: not one of ours)."""
    if name == DAEMON_DEVICE:
        return DeviceType.DAEMON
    return DeviceType.CHANNEL if placement.is_channel_device(name) else None


def slice_name(node_name: str) -> str:
    """The node's ResourceSlice name: stable, so restarts update instead of duplicating."""
    return f"{node_name}-{constants.DRIVER_NAME}"


def slice_manifest(
    *,
    node_name: str,
    node_uid: str,
    devices: list[PublishedDevice],
    clique: str,
    holder: str,
    turn: str,
    binding_conditions: bool,
    generation: int,
) -> dict[str, Any]:
    """The ResourceSlice object (resource.k8s.io/v1) for this node.

    Channel devices show who holds the node (``api/placement.py``): tainted for the holder;
    while nobody holds it, tainted for the domain whose turn it is, else with the binding
    conditions the controller answers.
    """
    published = []
    for device in devices:
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": device.type.value},
            "id": {"int": 0},
        }
        if clique:
            attributes[constants.CLIQUE_ATTRIBUTE] = {"string": clique}
        entry: dict[str, Any] = {"name": device.name, "attributes": attributes}
        if device.type is DeviceType.CHANNEL:
            attributes["slot"] = {"int": device.slot}
            attributes[placement.HOLDER_ATTRIBUTE] = {"string": holder}
            if holder or turn:
                entry["taints"] = [placement.taint(holder or turn)]
            elif binding_conditions:
                entry["bindingConditions"] = [placement.RESERVED_CONDITION]
                entry["bindingFailureConditions"] = [placement.REFUSED_CONDITION]
        published.append(entry)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node_name),
            "labels": {"app.kubernetes.io/managed-by": "compute-domains-kubelet-plugin"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": constants.DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": published,
        },
    }


def carries_taints(stored: dict[str, Any]) -> bool:
    """Whether a stored slice kept the taints of its channel devices.

    A server with device taints off drops them on write.
    """
    return any(d.get("taints") for d in stored.get("spec", {}).get("devices") or [])
