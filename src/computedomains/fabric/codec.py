"""GPU entries as JSON (``fabricverdict.GpuEntry``), shared by the fake-NVML and verdict files.

Decoding is strict: a field of the wrong type is a :class:`ValueError` naming the field, so
callers can report which file is bad and where, instead of carrying garbage onwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from computedomains.api import fabricverdict
from computedomains.api.schema import ValidationError
from computedomains.fabric.model import FabricState, Gpu, GpuFabric

T = TypeVar("T")


def field(obj: Mapping[str, Any], key: str, kind: type[T], where: str) -> T:
    """``obj[key]`` when it is a ``kind``; ValueError naming ``where.key`` otherwise."""
    value = obj.get(key)
    # bool is an int to Python, never to a JSON schema.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}.{key}: expected {kind.__name__}, found {value!r}")
    return value


def optional_field(obj: Mapping[str, Any], key: str, kind: type[T], where: str) -> T | None:
    """Like :func:`field`, but an absent or null value is None."""
    return None if obj.get(key) is None else field(obj, key, kind, where)


def gpu_entry(gpu: Gpu) -> fabricverdict.GpuEntry:
    """``gpu`` in its wire form (the FabricVerdict file's ``gpus`` entries)."""
    fabric = None
    if gpu.fabric is not None:
        fabric = fabricverdict.GpuFabricEntry(
            state=gpu.fabric.state.value,
            status=gpu.fabric.status,
            cluster_uuid=gpu.fabric.cluster_uuid,
            clique_id=gpu.fabric.clique_id,
            health_mask=gpu.fabric.health_mask,
        )
    return fabricverdict.GpuEntry(index=gpu.index, uuid=gpu.uuid, name=gpu.name, fabric=fabric)


def gpu_from_json(obj: object, where: str) -> Gpu:
    """Decode one GPU entry; ValueError naming the offending field."""
    try:
        entry = fabricverdict.GpuEntry.from_dict(obj, strict=False)
    except ValidationError as exc:
        raise ValueError(f"{where}.{exc}" if exc.field else f"{where}: {exc}") from None
    return Gpu(
        index=entry.index,
        uuid=entry.uuid,
        name=entry.name,
        fabric=None if entry.fabric is None else _fabric(entry.fabric, f"{where}.fabric"),
    )


def _fabric(entry: fabricverdict.GpuFabricEntry, where: str) -> GpuFabric:
    if entry.state not in FabricState.__members__:
        raise ValueError(f"{where}.state: unknown fabric state {entry.state!r}")
    try:
        canonical = str(uuid.UUID(entry.cluster_uuid))
    except ValueError:
        raise ValueError(f"{where}.clusterUuid: not a UUID: {entry.cluster_uuid!r}") from None
    return GpuFabric(
        state=FabricState(entry.state),
        status=entry.status,
        cluster_uuid=canonical,
        clique_id=entry.clique_id,
        health_mask=entry.health_mask,
    )
