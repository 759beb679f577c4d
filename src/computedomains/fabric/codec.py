"""GPU entries as JSON (``fabricverdict.GpuEntry``): the FabricVerdict file's ``gpus``."""

from __future__ import annotations

from computedomains.api import fabricverdict
from computedomains.fabric.model import Gpu


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
