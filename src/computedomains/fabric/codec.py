"""GPU entries as JSON: the shape shared by the fake-NVML file and the FabricVerdict file.

Decoding is strict: a field of the wrong type is a :class:`ValueError` naming the field, so
callers can report which file is bad and where, instead of carrying garbage onwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

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


def gpu_to_json(gpu: Gpu) -> dict[str, Any]:
    """``gpu`` as a JSON-ready dict (``fabric`` null when the GPU has none)."""
    fabric = None
    if gpu.fabric is not None:
        fabric = {
            "state": gpu.fabric.state.value,
            "status": gpu.fabric.status,
            "clusterUuid": gpu.fabric.cluster_uuid,
            "cliqueId": gpu.fabric.clique_id,
            "healthMask": gpu.fabric.health_mask,
        }
    return {"index": gpu.index, "uuid": gpu.uuid, "name": gpu.name, "fabric": fabric}


def gpu_from_json(obj: object, where: str) -> Gpu:
    """Decode one GPU entry; ValueError naming the offending field."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, found {obj!r}")
    fabric = optional_field(obj, "fabric", dict, where)
    return Gpu(
        index=field(obj, "index", int, where),
        uuid=field(obj, "uuid", str, where),
        name=field(obj, "name", str, where),
        fabric=None if fabric is None else _fabric_from_json(fabric, f"{where}.fabric"),
    )


def _fabric_from_json(obj: Mapping[str, Any], where: str) -> GpuFabric:
    state = field(obj, "state", str, where)
    if state not in FabricState.__members__:
        raise ValueError(f"{where}.state: unknown fabric state {state!r}")
    cluster_uuid = field(obj, "clusterUuid", str, where)
    try:
        canonical = str(uuid.UUID(cluster_uuid))
    except ValueError:
        raise ValueError(f"{where}.clusterUuid: not a UUID: {cluster_uuid!r}") from None
    return GpuFabric(
        state=FabricState(state),
        status=field(obj, "status", str, where),
        cluster_uuid=canonical,
        clique_id=field(obj, "cliqueId", int, where),
        health_mask=optional_field(obj, "healthMask", int, where),
    )
