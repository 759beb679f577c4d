"""The plugin's node-local record of prepared claims: versioned, atomic, boot scoped.

Per claim it stores a state: ``PrepareStarted`` (work begun, maybe half done),
``PrepareCompleted`` (devices handed to the kubelet) or ``PrepareAborted`` (unprepared
while still starting: a late retry of that same allocation must not re-take devices).
A file from another boot is discarded (CDI specs and IMEX state died with the boot); a
corrupt file is moved aside and the plugin starts empty instead of crash-looping.
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
from typing import Any

from computedomains import nodefiles

KIND = "PluginCheckpoint"


class ClaimState(enum.StrEnum):
    """Where a claim's prepare stands."""

    STARTED = "PrepareStarted"
    COMPLETED = "PrepareCompleted"
    ABORTED = "PrepareAborted"


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """One device as answered to the kubelet."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ClaimEntry:
    """One claim's record."""

    uid: str
    namespace: str
    name: str
    state: ClaimState
    domain_uid: str
    """The ComputeDomain the claim belongs to ("" for an IMEX-agent claim without one)."""
    device_type: str
    allocation: str
    """Digest of the claim's allocation: identifies a stale retry of an aborted prepare."""
    devices: tuple[PreparedDevice, ...] = ()
    aborted_at: float | None = None

    def holds_node(self) -> bool:
        """True while this claim keeps the node in its domain."""
        return self.state is not ClaimState.ABORTED and self.device_type == "channel"


@dataclasses.dataclass
class Checkpoint:
    """All claims of this node for one boot."""

    boot_id: str
    claims: dict[str, ClaimEntry] = dataclasses.field(default_factory=dict)
    _wire: dict[str, tuple[ClaimEntry, dict[str, Any]]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    """Serialized form per entry: entries are immutable, and re-encoding every claim on each
    write made prepare time grow with the number of claims on the node."""

    def to_document(self) -> dict[str, Any]:
        """The JSON document on disk."""
        wire = {}
        for uid, entry in self.claims.items():
            cached = self._wire.get(uid)
            if cached is None or cached[0] is not entry:
                cached = (entry, _entry_to_dict(entry))
                self._wire[uid] = cached
            wire[uid] = cached[1]
        for uid in self._wire.keys() - self.claims.keys():
            del self._wire[uid]
        return nodefiles.document(KIND, {"bootID": self.boot_id, "claims": wire})

    @classmethod
    def from_document(cls, path: pathlib.Path, document: dict[str, Any]) -> Checkpoint:
        """Parse a document; any structural problem is a :class:`CorruptNodeFile`."""
        try:
            claims = {uid: _entry_from_dict(raw) for uid, raw in document["claims"].items()}
            return cls(boot_id=str(document["bootID"]), claims=claims)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise nodefiles.CorruptNodeFile(path, f"malformed checkpoint ({exc!r})") from None


def _entry_to_dict(entry: ClaimEntry) -> dict[str, Any]:
    return {
        "uid": entry.uid,
        "namespace": entry.namespace,
        "name": entry.name,
        "state": entry.state.value,
        "domain_uid": entry.domain_uid,
        "device_type": entry.device_type,
        "allocation": entry.allocation,
        "devices": [
            {
                "requests": list(d.requests),
                "pool": d.pool,
                "device": d.device,
                "cdi_ids": list(d.cdi_ids),
            }
            for d in entry.devices
        ],
        "aborted_at": entry.aborted_at,
    }


def _entry_from_dict(raw: dict[str, Any]) -> ClaimEntry:
    devices = tuple(
        PreparedDevice(tuple(d["requests"]), d["pool"], d["device"], tuple(d["cdi_ids"]))
        for d in raw["devices"]
    )
    return ClaimEntry(
        uid=raw["uid"],
        namespace=raw["namespace"],
        name=raw["name"],
        state=ClaimState(raw["state"]),
        domain_uid=raw["domain_uid"],
        device_type=raw["device_type"],
        allocation=raw["allocation"],
        devices=devices,
        aborted_at=raw.get("aborted_at"),
    )


class LoadOutcome(enum.StrEnum):
    """What loading found, for the Event and log the plugin emits."""

    NEW = "New"
    LOADED = "Loaded"
    CORRUPT = "CheckpointCorrupt"
    REBOOTED = "CheckpointFromEarlierBoot"


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A loaded checkpoint and how it was obtained."""

    checkpoint: Checkpoint
    outcome: LoadOutcome
    detail: str
    discarded: tuple[ClaimEntry, ...] = ()


def load(path: pathlib.Path, *, boot_id: str) -> Loaded:
    """Read the checkpoint for this boot, quarantining a corrupt one."""
    try:
        document = nodefiles.read_json(path, kind=KIND)
        if document is None:
            return Loaded(Checkpoint(boot_id), LoadOutcome.NEW, "no checkpoint yet")
        checkpoint = Checkpoint.from_document(path, document)
    except nodefiles.CorruptNodeFile as exc:
        moved = nodefiles.quarantine(path)
        detail = f"checkpoint unusable ({exc.reason}); moved to {moved.name}, starting empty"
        return Loaded(Checkpoint(boot_id), LoadOutcome.CORRUPT, detail)
    if checkpoint.boot_id != boot_id:
        detail = (
            f"checkpoint is from boot {checkpoint.boot_id}, this is {boot_id}; "
            f"dropping {len(checkpoint.claims)} claims"
        )
        return Loaded(
            Checkpoint(boot_id), LoadOutcome.REBOOTED, detail, tuple(checkpoint.claims.values())
        )
    return Loaded(checkpoint, LoadOutcome.LOADED, f"{len(checkpoint.claims)} claims")


def save(path: pathlib.Path, checkpoint: Checkpoint) -> None:
    """Write the checkpoint: atomic, and crash-safe within the boot it is valid for."""
    nodefiles.write_json(path, checkpoint.to_document(), mode=0o600, compact=True, boot_scoped=True)
