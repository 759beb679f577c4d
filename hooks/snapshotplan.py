"""The snapshot's shape: objects packed into gzip'd ConfigMap chunks, and the manifest.

Pure: :mod:`computedomains.hooks.snapshot` reads and writes the ConfigMaps this module builds.
A ConfigMap holds at most 1 MiB; each chunk stays under :data:`CHUNK_LIMIT` once base64'd (as
``binaryData`` travels), leaving room for the object's metadata.
"""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import constants

CHUNK_LIMIT = 900 * 1024
"""Bytes of one chunk's ``binaryData`` value, base64'd."""
RAW_BUDGET = 8 * CHUNK_LIMIT
"""Uncompressed JSON packed into one chunk before compressing; a chunk that compresses to
more than :data:`CHUNK_LIMIT` is split in halves (objects of one kind compress well)."""
DATA_KEY = "objects.json.gz"
MANIFEST_KEY = "manifest.json"
SNAPSHOT_LABEL = f"{constants.OWN_PREFIX}/snapshot"
"""On every ConfigMap of a snapshot: its prefix (so ``-l`` lists them)."""
PART_LABEL = f"{constants.OWN_PREFIX}/snapshot-part"
OBJECTS_PART = "objects"
MANIFEST_PART = "manifest"


class SnapshotError(ValueError):
    """A snapshot cannot be built or read back (an object too large, a chunk corrupted)."""


def saved_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as saved: everything but ``managedFields`` (bookkeeping, rebuilt on write)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _encoded_size(compressed: bytes) -> int:
    return 4 * ((len(compressed) + 2) // 3)


def _compress(objects: Sequence[Mapping[str, Any]]) -> bytes:
    raw = json.dumps(list(objects), separators=(",", ":"), sort_keys=True).encode()
    # mtime=0: the same objects give the same bytes (and hash) on every run.
    return gzip.compress(raw, compresslevel=6, mtime=0)


def pack(
    objects: Sequence[Mapping[str, Any]], *, limit: int = CHUNK_LIMIT, raw_budget: int = RAW_BUDGET
) -> list[bytes]:
    """The objects as gzip'd JSON chunks, in order, each under ``limit`` once base64'd."""
    groups: list[list[Mapping[str, Any]]] = [[]]
    size = 0
    for obj in objects:
        length = len(json.dumps(obj, separators=(",", ":")))
        if groups[-1] and size + length > raw_budget:
            groups.append([])
            size = 0
        groups[-1].append(obj)
        size += length
    chunks: list[bytes] = []
    for group in groups:
        if group:
            chunks.extend(_fit(group, limit))
    return chunks


def _fit(group: Sequence[Mapping[str, Any]], limit: int) -> list[bytes]:
    compressed = _compress(group)
    if _encoded_size(compressed) <= limit:
        return [compressed]
    if len(group) == 1:
        meta = group[0].get("metadata") or {}
        raise SnapshotError(
            f"{group[0].get('kind')} {meta.get('namespace')}/{meta.get('name')} alone "
            f"compresses to {len(compressed)} bytes, more than a ConfigMap chunk holds"
        )
    half = len(group) // 2
    return _fit(group[:half], limit) + _fit(group[half:], limit)


def unpack(chunk: bytes) -> list[dict[str, Any]]:
    """The objects of one chunk."""
    try:
        objects = json.loads(gzip.decompress(chunk))
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"snapshot chunk unreadable: {exc}") from exc
    if not isinstance(objects, list):
        raise SnapshotError("snapshot chunk is not a list of objects")
    return objects


def digest(chunk: bytes) -> str:
    """The SHA-256 of a chunk (hex), recorded in the manifest."""
    return hashlib.sha256(chunk).hexdigest()


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a complete snapshot holds; written last, so its presence marks completeness."""

    migration: str
    """:func:`computedomains.hooks.crdview.migration_id` of the migration it was taken for."""
    taken_at: str
    crds: tuple[Mapping[str, Any], ...]
    """Per CRD: its identity and ``resourceVersion`` when the snapshot was taken."""
    counts: Mapping[str, int]
    """Objects saved per CRD name."""
    chunks: tuple[str, ...]
    """SHA-256 of each chunk, in order (chunk ``n`` is ConfigMap ``<prefix>-<n>``)."""

    def to_json(self) -> str:
        """The manifest as stored."""
        return json.dumps(
            {
                "migration": self.migration,
                "takenAt": self.taken_at,
                "crds": list(self.crds),
                "counts": dict(self.counts),
                "chunks": list(self.chunks),
            },
            sort_keys=True,
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse :meth:`to_json`'s text; :class:`SnapshotError` when it is not one."""
        try:
            doc = json.loads(text)
            return cls(
                migration=str(doc["migration"]),
                taken_at=str(doc["takenAt"]),
                crds=tuple(doc["crds"]),
                counts={str(k): int(v) for k, v in doc["counts"].items()},
                chunks=tuple(str(c) for c in doc["chunks"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"snapshot manifest unreadable: {exc}") from exc

    @property
    def total(self) -> int:
        """Objects saved."""
        return sum(self.counts.values())


def chunk_name(prefix: str, index: int) -> str:
    """ConfigMap name of chunk ``index``."""
    return f"{prefix}-{index}"


def manifest_name(prefix: str) -> str:
    """ConfigMap name of the manifest."""
    return f"{prefix}-manifest"


def _labels(prefix: str, part: str) -> dict[str, str]:
    return {
        SNAPSHOT_LABEL: prefix,
        PART_LABEL: part,
        "app.kubernetes.io/managed-by": "computedomains-hooks",
    }


def chunk_configmap(prefix: str, index: int, chunk: bytes, *, namespace: str) -> dict[str, Any]:
    """The ConfigMap of one chunk."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": chunk_name(prefix, index),
            "namespace": namespace,
            "labels": _labels(prefix, OBJECTS_PART),
        },
        "binaryData": {DATA_KEY: base64.b64encode(chunk).decode()},
    }


def manifest_configmap(prefix: str, manifest: Manifest, *, namespace: str) -> dict[str, Any]:
    """The ConfigMap of the manifest."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": manifest_name(prefix),
            "namespace": namespace,
            "labels": _labels(prefix, MANIFEST_PART),
        },
        "data": {MANIFEST_KEY: manifest.to_json()},
    }


def chunk_of(configmap: Mapping[str, Any]) -> bytes:
    """The chunk bytes in a chunk ConfigMap."""
    value = (configmap.get("binaryData") or {}).get(DATA_KEY)
    if not isinstance(value, str):
        name = (configmap.get("metadata") or {}).get("name")
        raise SnapshotError(f"ConfigMap {name} has no binaryData {DATA_KEY}")
    return base64.b64decode(value)


def manifest_of(configmap: Mapping[str, Any] | None) -> Manifest | None:
    """The manifest in a manifest ConfigMap; None when there is none (or it is unreadable)."""
    if configmap is None:
        return None
    text = (configmap.get("data") or {}).get(MANIFEST_KEY)
    if not isinstance(text, str):
        return None
    try:
        return Manifest.from_json(text)
    except SnapshotError:
        return None


def reusable(manifest: Manifest | None, migration: str) -> bool:
    """A complete snapshot of this very migration exists: a rerun keeps it."""
    return manifest is not None and manifest.migration == migration


def verify(manifest: Manifest, chunks: Sequence[bytes]) -> None:
    """Raise :class:`SnapshotError` unless ``chunks`` are exactly the manifest's."""
    if len(chunks) != len(manifest.chunks):
        raise SnapshotError(
            f"snapshot has {len(chunks)} chunks, its manifest {len(manifest.chunks)}"
        )
    for index, (chunk, expected) in enumerate(zip(chunks, manifest.chunks, strict=True)):
        if digest(chunk) != expected:
            raise SnapshotError(f"snapshot chunk {index} does not match its manifest's hash")
