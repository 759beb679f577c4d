"""The plugin's node-local record of prepared claims: versioned, atomic, boot scoped.

Per claim it stores a state: ``PrepareStarted`` (work begun, maybe half done),
``PrepareCompleted`` (devices handed to the kubelet) or ``PrepareAborted`` (unprepared
while still starting: a late retry of that same allocation must not re-take devices).
A file from another boot is discarded (CDI specs and IMEX state died with the boot). A
corrupt, unreadable or newer-version file is moved aside, and the plugin rebuilds its claims
from the node and the API (``rebuild.py``) instead of crash-looping or starting empty.

Versions: the envelope (``apiVersion``/``kind``) is the one every node file carries
(``nodefiles``); the checkpoint's own schema is ``checkpointVersion`` in the body, so it can
change without touching the other node files. Every known version converts to the one model
below (:data:`_READERS`); a file without the field is version 1, the first format.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import pathlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from computedomains import nodefiles
from computedomains.kubeletplugin.devices import DeviceType

KIND = "PluginCheckpoint"
VERSION = 1
"""The schema this plugin writes. A newer one (from a newer plugin, before a rollback) is
not guessed at: it is quarantined and the claims are rebuilt."""


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
    device_type: DeviceType | None
    """None for a claim rebuilt from an allocation that names no single device type."""
    allocation: str
    """Digest of the claim's allocation: a prepare finishes only the allocation it started."""
    devices: tuple[PreparedDevice, ...] = ()
    aborted_at: float | None = None

    def holds_node(self) -> bool:
        """True while this claim keeps the node in its domain."""
        return self.state is not ClaimState.ABORTED and self.device_type is DeviceType.CHANNEL


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
        """The JSON document on disk (schema :data:`VERSION`)."""
        wire = {}
        for uid, entry in self.claims.items():
            cached = self._wire.get(uid)
            if cached is None or cached[0] is not entry:
                cached = (entry, _entry_to_dict(entry))
                self._wire[uid] = cached
            wire[uid] = cached[1]
        for uid in self._wire.keys() - self.claims.keys():
            del self._wire[uid]
        body = {"checkpointVersion": VERSION, "bootID": self.boot_id, "claims": wire}
        return nodefiles.document(KIND, body)

    @classmethod
    def from_document(cls, path: pathlib.Path, document: dict[str, Any]) -> Checkpoint:
        """Parse a document of a known version; :class:`NewerVersion` for a newer one.

        Any structural problem is a :class:`nodefiles.CorruptNodeFile`.
        """
        version = document.get("checkpointVersion", 1)
        reader = _READERS.get(version) if type(version) is int else None  # not a bool
        if reader is None and type(version) is int and version > VERSION:
            raise NewerVersion(path, f"checkpointVersion {version}, this plugin knows {VERSION}")
        if reader is None:
            raise nodefiles.CorruptNodeFile(path, f"invalid checkpointVersion {version!r}")
        try:
            return reader(document)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise nodefiles.CorruptNodeFile(path, f"malformed checkpoint ({exc!r})") from None


class NewerVersion(nodefiles.CorruptNodeFile):
    """A checkpoint written by a newer plugin (a rollback): unusable here, but not garbage."""


def _from_v1(document: dict[str, Any]) -> Checkpoint:
    claims = {str(uid): _entry_from_dict(raw) for uid, raw in document["claims"].items()}
    return Checkpoint(boot_id=str(document["bootID"]), claims=claims)


_READERS: Mapping[int, Callable[[dict[str, Any]], Checkpoint]] = types.MappingProxyType(
    {1: _from_v1}
)
"""Schema version -> its conversion to the model."""


def _entry_to_dict(entry: ClaimEntry) -> dict[str, Any]:
    return {
        "uid": entry.uid,
        "namespace": entry.namespace,
        "name": entry.name,
        "state": entry.state.value,
        "domain_uid": entry.domain_uid,
        "device_type": entry.device_type.value if entry.device_type else "",
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
        device_type=DeviceType(raw["device_type"]) if raw["device_type"] else None,
        allocation=raw["allocation"],
        devices=devices,
        aborted_at=raw.get("aborted_at"),
    )


class LoadOutcome(enum.StrEnum):
    """What loading found; the values are the reasons of the Node Events the plugin emits."""

    NEW = "New"
    LOADED = "Loaded"
    CORRUPT = "CheckpointCorrupt"
    UNREADABLE = "CheckpointUnreadable"
    NEWER_VERSION = "CheckpointFromNewerVersion"
    REBOOTED = "CheckpointFromEarlierBoot"

    @property
    def needs_rebuild(self) -> bool:
        """The file says nothing usable about this boot's claims: ask the node and the API.

        Also for a missing file (deleted by hand, say), where the rebuild normally finds
        nothing; after a reboot there is nothing to find (the claims died with the boot).
        """
        return self in (
            LoadOutcome.NEW,
            LoadOutcome.CORRUPT,
            LoadOutcome.UNREADABLE,
            LoadOutcome.NEWER_VERSION,
        )


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A loaded checkpoint and how it was obtained."""

    checkpoint: Checkpoint
    outcome: LoadOutcome
    detail: str
    discarded: tuple[ClaimEntry, ...] = ()


def load(path: pathlib.Path, *, boot_id: str) -> Loaded:
    """Read the checkpoint for this boot, quarantining one that cannot be used."""
    try:
        document = nodefiles.read_json(path, kind=KIND)
        if document is None:
            return Loaded(Checkpoint(boot_id), LoadOutcome.NEW, "no checkpoint yet")
        checkpoint = Checkpoint.from_document(path, document)
    except NewerVersion as exc:
        return _quarantined(path, boot_id, LoadOutcome.NEWER_VERSION, exc.reason)
    except nodefiles.CorruptNodeFile as exc:
        return _quarantined(path, boot_id, LoadOutcome.CORRUPT, exc.reason)
    except OSError as exc:  # EIO, EACCES, a directory in its place: unreadable, not absent
        return _quarantined(path, boot_id, LoadOutcome.UNREADABLE, f"{exc.strerror or exc}")
    if checkpoint.boot_id != boot_id:
        detail = (
            f"checkpoint is from boot {checkpoint.boot_id}, this is {boot_id}; "
            f"dropping {len(checkpoint.claims)} claims"
        )
        return Loaded(
            Checkpoint(boot_id), LoadOutcome.REBOOTED, detail, tuple(checkpoint.claims.values())
        )
    return Loaded(checkpoint, LoadOutcome.LOADED, f"{len(checkpoint.claims)} claims")


def _quarantined(path: pathlib.Path, boot_id: str, outcome: LoadOutcome, reason: str) -> Loaded:
    where = "it could not be moved aside"
    with contextlib.suppress(OSError):  # the next save replaces it by rename anyway
        where = f"moved to {nodefiles.quarantine(path).name}"
    return Loaded(Checkpoint(boot_id), outcome, f"checkpoint unusable ({reason}); {where}")


def save(path: pathlib.Path, checkpoint: Checkpoint) -> None:
    """Write the checkpoint: atomic, and crash-safe within the boot it is valid for."""
    nodefiles.write_json(path, checkpoint.to_document(), mode=0o600, compact=True, boot_scoped=True)
