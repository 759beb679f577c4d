"""Publish the node's ResourceSlice and keep it in step with the fabric verdict."""

from __future__ import annotations

import logging
from typing import Any

from computedomains.kube import client
from computedomains.kube import nodes as kube_nodes
from computedomains.kubeletplugin import config, devices, nodestate

log = logging.getLogger(__name__)
_SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class Publisher:
    """Writes the slice when what it should contain changes (and at start)."""

    def __init__(self, api: client.Client, cfg: config.PluginConfig) -> None:
        self._api = api
        self._cfg = cfg
        self._published: tuple[tuple[devices.PublishedDevice, ...], str] | None = None

    @property
    def published(self) -> bool:
        """Whether the slice has been written by this process."""
        return self._published is not None

    def sync(self) -> bool:
        """Publish if the verdict changed what to publish; returns True when it wrote."""
        fabric = nodestate.read_fabric(self._cfg.fabric_verdict_file)
        wanted = tuple(devices.node_devices(slots=self._cfg.channel_slots, usable=fabric.usable))
        key = (wanted, fabric.clique)
        if key == self._published:
            return False
        name = devices.slice_name(self._cfg.node_name)
        node = self._api.get(kube_nodes.path(self._cfg.node_name))
        try:
            existing: dict[str, Any] | None = self._api.get(f"{_SLICES}/{name}")
        except client.ApiError as exc:
            if exc.status != client.NOT_FOUND:
                raise
            existing = None
        generation = 1
        if existing is not None:
            generation = int(existing["spec"]["pool"]["generation"]) + 1
        body = devices.slice_manifest(
            node_name=self._cfg.node_name,
            node_uid=node["metadata"]["uid"],
            devices=list(wanted),
            clique=fabric.clique,
            generation=generation,
        )
        if existing is None:
            self._api.create(_SLICES, body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            self._api.replace(f"{_SLICES}/{name}", body)
        log.info(
            "published %d devices (fabric %s, clique %s, pool generation %d)",
            len(wanted),
            fabric.verdict,
            fabric.clique or "-",
            generation,
        )
        self._published = key
        return True
