"""Run the kubelet plugin: build its parts, serve until SIGTERM, shut down cleanly."""

from __future__ import annotations

import datetime
import http.server
import logging
import signal
import threading
import time
import types

import grpc
import prometheus_client

from computedomains import httpserver
from computedomains.api import fabricverdict, placement, resources
from computedomains.drapb import dra_v1_pb2, pluginregistration_v1_pb2, services
from computedomains.kube import client as kube_client
from computedomains.kube import cliquewatch, events
from computedomains.kube.informer import Informer
from computedomains.kubeletplugin import config, driver, metrics, server, slices
from computedomains.nodeinit import run as nodeinit_run

log = logging.getLogger(__name__)
SLICE_SYNC_SECONDS = 2.0
RECHECK_JOIN_SECONDS = 5.0
CLIQUE_LIST_SECONDS = 2.0
"""How long a slice sync waits for the first list of a newly followed clique (milliseconds, as a
rule): a slice published before it would show a reserved node as free."""


def liveness(cfg: config.PluginConfig) -> tuple[bool, str]:
    """Both sockets answer: GetInfo on registration, an empty prepare on the DRA service."""
    with grpc.insecure_channel(f"unix://{cfg.registration_socket}") as channel:
        info = services.Client(channel, services.REGISTRATION).call(
            "GetInfo", pluginregistration_v1_pb2.InfoRequest(), timeout=2
        )
    with grpc.insecure_channel(f"unix://{cfg.dra_socket}") as channel:
        services.Client(channel, services.DRA["v1.DRAPlugin"]).call(
            "NodePrepareResources", dra_v1_pb2.NodePrepareResourcesRequest(), timeout=2
        )
    return True, f"{info.name} serving {', '.join(info.supported_versions)}"


def _housekeep(
    stop: threading.Event, wake: threading.Event, *, publisher: slices.Publisher,
    core: driver.Driver, collect_every: float,
) -> None:  # fmt: skip
    """Keep the slice in step (at once when woken) and collect garbage now and then."""
    next_gc = time.monotonic()
    while not stop.is_set():
        wake.wait(SLICE_SYNC_SECONDS)
        wake.clear()
        if stop.is_set():
            return
        try:
            publisher.sync()
            if time.monotonic() >= next_gc:
                core.collect_garbage()
                next_gc = time.monotonic() + collect_every
        except Exception:
            log.exception("housekeeping failed; retrying")


def _start_recheck(
    cfg: config.PluginConfig, api: kube_client.Client, stop: threading.Event, core: driver.Driver
) -> threading.Thread | None:
    """Start node-init's fabric re-check in a thread, when configured, on the plugin's client.

    Its fault grace also asks ``core``'s ledger whether prepared claims hold the node.
    """
    if cfg.fabric_recheck is None:
        return None
    checks = logging.getLogger("computedomains.nodeinit")

    def held() -> bool:
        return core.node_domain is not None

    kwargs = {"stop": stop, "log": checks.info, "warn": checks.warning, "api": api, "held": held}
    thread = threading.Thread(
        target=nodeinit_run.watch,
        args=(cfg.fabric_recheck,),
        kwargs=kwargs,
        name="fabric-recheck",
        daemon=True,
    )
    thread.start()
    return thread


class _Watches:
    """What the plugin watches, and what it reads out of it.

    The clique objects of the node's clique, which name the nodes the controller reserved,
    and one object: whose turn it is to place on free nodes (``placement.TURN_CONFIGMAP``).
    Claims and domains are read one by one (no cluster-wide watch). Building this calls no
    API (the clique watch starts with the first follow, the turn watch with ``start``).
    """

    def __init__(
        self, api: kube_client.Client, cfg: config.PluginConfig, *, wake: threading.Event
    ) -> None:
        self._node_name = cfg.node_name
        self.cliques = cliquewatch.CliqueWatch(api, namespace=cfg.namespace, on_change=wake.set)
        self.turns = Informer(
            api, path=resources.CONFIG_MAPS.path(namespace=cfg.namespace),
            field_selector=f"metadata.name={placement.TURN_CONFIGMAP}",
            on_change=lambda kind, obj: wake.set(), on_relist=wake.set,
        )  # fmt: skip

    def recorded(self) -> str:
        """The domain the membership record names for this node ("" none)."""
        return placement.recorded_holder(self._node_name, self.cliques.by_domain())

    def holder(self, clique: str, core: driver.Driver) -> str:
        """The domain that holds the node of ``clique`` ("" none), for its slice."""
        self.cliques.follow(clique)
        self.cliques.wait_listed(CLIQUE_LIST_SECONDS)  # without it: the claims prepared here alone
        # The record, else what the node's own claims say (a node without a slot or a clique
        # is named by no clique object, yet it is the domain's once a claim is prepared).
        return self.recorded() or core.node_domain or ""

    def turn(self) -> str:
        """Whose turn it is to place on free nodes ("" nobody's)."""
        # Nobody's until the first list: binding conditions are the safe default.
        found = self.turns.items() if self.turns.synced() else []
        now = datetime.datetime.now(datetime.UTC)
        return placement.turn_of(found[0] if found else None, now=now)

    def stop(self) -> None:
        """Stop both watches."""
        self.cliques.stop()
        self.turns.stop()


def _serve_http(
    cfg: config.PluginConfig,
    stats: metrics.PluginMetrics,
    *,
    publisher: slices.Publisher,
    registration: server.Registration,
) -> http.server.ThreadingHTTPServer:
    """Metrics and probes: live while both sockets answer, ready once published and registered."""

    def readiness() -> tuple[bool, str]:
        ok = publisher.published and registration.registered
        return ok, f"slice published: {publisher.published}, kubelet registration: " + (
            "accepted" if registration.registered else registration.error or "pending"
        )

    return httpserver.serve(
        cfg.http_bind,
        registry=stats.registry,
        probes={"/healthz": lambda: liveness(cfg), "/readyz": readiness},
    )


def run(cfg: config.PluginConfig) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    stop = threading.Event()
    # Set when the node's hold may have changed (a clique object of its clique changed): the
    # slice is republished at once, if it should change, rather than at the next periodic sync.
    wake = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    api = kube_client.connect(cfg.kubeconfig, cfg.api_budget)
    stats = metrics.PluginMetrics(prometheus_client.CollectorRegistry())
    stats.api_requests.attach(api)
    watches = _Watches(api, cfg, wake=wake)
    recorder = events.Recorder(api, component=driver.COMPONENT, host=cfg.node_name)
    fabric = fabricverdict.FabricTracker(cfg.fabric_verdict_file, grace=cfg.fault_grace)
    core = driver.Driver(
        cfg, api=api, stats=stats, recorder=recorder, fabric=fabric.read, recorded=watches.recorded
    )
    # The first call that reaches out: the fabric re-check must not wait for (or depend on)
    # the plugin's own start. It asks the ledger, which holds no claim until core.load().
    recheck = _start_recheck(cfg, api, stop, core)
    watches.turns.start()
    core.load()
    publisher = slices.Publisher(
        api, cfg, holder=lambda clique: watches.holder(clique, core), turn=watches.turn,
        fabric=fabric.read,
    )  # fmt: skip
    publisher.sync()
    registration = server.Registration(cfg.dra_socket)
    # A prepare may wait for IMEX: one thread per claim a node can hold, plus room for probes.
    dra = server.serve_dra(cfg.dra_socket, core, stats, workers=cfg.channel_slots + 8)
    reg = server.serve_registration(cfg.registration_socket, registration)
    endpoint = _serve_http(cfg, stats, publisher=publisher, registration=registration)
    log.info("kubelet plugin for node %s serving (%s)", cfg.node_name, cfg.dra_socket)
    _housekeep(stop, wake, publisher=publisher, core=core, collect_every=cfg.collection_interval)
    log.info("shutting down")
    reg.stop(grace=None)
    cfg.registration_socket.unlink(missing_ok=True)
    dra.stop(grace=5).wait()
    watches.stop()
    endpoint.shutdown()
    if recheck is not None:
        recheck.join(RECHECK_JOIN_SECONDS)  # let a check in progress finish its writes
    return 0
