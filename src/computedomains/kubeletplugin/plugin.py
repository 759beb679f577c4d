"""Run the kubelet plugin: build its parts, serve until SIGTERM, shut down cleanly."""

from __future__ import annotations

import logging
import signal
import threading
import types

import grpc
import prometheus_client

from computedomains import httpserver
from computedomains.api import constants
from computedomains.drapb import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from computedomains.kube import client as kube_client
from computedomains.kube import events
from computedomains.kube.informer import Informer
from computedomains.kubeletplugin import config, driver, metrics, server, slices

log = logging.getLogger(__name__)
SLICE_SYNC_SECONDS = 2.0
GC_SECONDS = 60.0
_DOMAINS = f"/apis/{constants.API_VERSION}/{constants.COMPUTE_DOMAIN_PLURAL}"
_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


def liveness(cfg: config.PluginConfig) -> tuple[bool, str]:
    """Both sockets answer: GetInfo on registration, an empty prepare on the DRA service."""
    with grpc.insecure_channel(f"unix://{cfg.registration_socket}") as channel:
        info = pluginregistration_v1_pb2_grpc.RegistrationStub(channel).GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=2
        )
    with grpc.insecure_channel(f"unix://{cfg.dra_socket}") as channel:
        dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(), timeout=2
        )
    return True, f"{info.name} serving {', '.join(info.supported_versions)}"


def run(cfg: config.PluginConfig) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    stop = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    api = kube_client.connect(cfg.kubeconfig)
    stats = metrics.PluginMetrics(prometheus_client.CollectorRegistry())
    domains = Informer(api, path=_DOMAINS)
    claims = Informer(api, path=_CLAIMS)
    domains.start()
    claims.start()
    recorder = events.Recorder(api, component=driver.COMPONENT, host=cfg.node_name)
    core = driver.Driver(
        cfg, api=api, stats=stats, recorder=recorder, domains=domains, claims_cache=claims
    )
    core.load()
    publisher = slices.Publisher(api, cfg)
    publisher.sync()
    registration = server.Registration(cfg.dra_socket)
    # A prepare may wait for IMEX: one thread per claim a node can hold, plus room for probes.
    dra = server.serve_dra(cfg.dra_socket, core, stats, workers=cfg.channel_slots + 8)
    reg = server.serve_registration(cfg.registration_socket, registration)

    def readiness() -> tuple[bool, str]:
        ok = publisher.published and registration.registered
        return ok, f"slice published: {publisher.published}, kubelet registration: " + (
            "accepted" if registration.registered else registration.error or "pending"
        )

    http = httpserver.serve(
        cfg.http_bind,
        registry=stats.registry,
        probes={"/healthz": lambda: liveness(cfg), "/readyz": readiness},
    )
    log.info("kubelet plugin for node %s serving (%s)", cfg.node_name, cfg.dra_socket)
    next_gc = 0.0
    while not stop.wait(SLICE_SYNC_SECONDS):
        try:
            publisher.sync()
            next_gc -= SLICE_SYNC_SECONDS
            if next_gc <= 0:
                core.collect_garbage()
                next_gc = GC_SECONDS
        except Exception:
            log.exception("housekeeping failed; retrying")
    log.info("shutting down")
    reg.stop(grace=None)
    cfg.registration_socket.unlink(missing_ok=True)
    dra.stop(grace=5).wait()
    domains.stop()
    claims.stop()
    http.shutdown()
    return 0
