"""Publish the node's ResourceSlice and keep it in step with the fabric verdict and the hold."""

from __future__ import annotations

import logging
from collections.abc import Callable

from computedomains.api import fabricverdict, resources
from computedomains.kube import client
from computedomains.kube import nodes as kube_nodes
from computedomains.kubeletplugin import config, devices

log = logging.getLogger(__name__)


class Publisher:
    """Writes the slice when what it should contain changes (and at start).

    ``holder`` says which domain holds the node of the clique given ("" nobody): the one the
    controller's record names, else the one the node's prepared claims are for
    (``api/placement.py``);
    ``turn`` whose turn it is to place on free nodes ("" nobody's); ``fabric`` reads the
    verdict (through the plugin's fault grace).
    """

    def __init__(
        self,
        api: client.Client,
        cfg: config.PluginConfig,
        *,
        holder: Callable[[str], str],
        turn: Callable[[], str],
        fabric: Callable[[], fabricverdict.NodeFabric],
    ) -> None:
        self._api = api
        self._cfg = cfg
        self._holder = holder
        self._turn = turn
        self._fabric = fabric
        self._published: tuple[tuple[devices.PublishedDevice, ...], str, str, str] | None = None
        self._taints_dropped = False
        """The API server dropped the device taints written (DRADeviceTaints off): a turn would
        then leave free nodes without any protection, so turns are not followed."""

    @property
    def published(self) -> bool:
        """Whether the slice has been written by this process."""
        return self._published is not None

    def sync(self) -> bool:
        """Publish if the verdict changed what to publish; returns True when it wrote."""
        fabric = self._fabric()
        wanted = tuple(devices.node_devices(slots=self._cfg.channel_slots, usable=fabric.usable))
        holder = self._holder(fabric.clique)
        turn = "" if holder or self._taints_dropped else self._turn()
        key = (wanted, fabric.clique, holder, turn)
        if key == self._published:
            return False  # every two seconds: an unchanged slice is no decision worth a line
        log.debug(
            "slice of node %s: publish; fabric %s (clique %s), held by %s, turn of %s, %d devices",
            self._cfg.node_name, fabric.verdict, fabric.clique or "-", holder or "nobody",
            turn or "nobody", len(wanted),
        )  # fmt: skip
        name = devices.slice_name(self._cfg.node_name)
        node = self._api.get(kube_nodes.path(self._cfg.node_name))
        existing = self._api.find(resources.RESOURCE_SLICES.path(name))
        generation = 1
        if existing is not None:
            generation = int(existing["spec"]["pool"]["generation"]) + 1
        body = devices.slice_manifest(
            node_name=self._cfg.node_name,
            node_uid=node["metadata"]["uid"],
            devices=list(wanted),
            clique=fabric.clique,
            holder=holder,
            turn=turn,
            binding_conditions=self._cfg.binding_conditions,
            generation=generation,
        )
        if existing is None:
            stored = self._api.create(resources.RESOURCE_SLICES.path(), body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            stored = self._api.replace(resources.RESOURCE_SLICES.path(name), body)
        if turn and not devices.carries_taints(stored):
            log.warning("the API server dropped the device taints (DRADeviceTaints is off): "
                        "free nodes keep binding conditions, whoever's turn it is")  # fmt: skip
            self._taints_dropped = True
            self._published = None
            return self.sync()
        log.info(
            "published %d devices (fabric %s, clique %s, held by %s, turn of %s, pool "
            "generation %d)",
            len(wanted),
            fabric.verdict,
            fabric.clique or "-",
            holder or "nobody",
            turn or "nobody",
            generation,
        )
        self._published = key
        return True
