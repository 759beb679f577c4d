"""gRPC: plugin registration, and the DRA service in both versions the kubelet speaks.

v1 and v1beta1 are the same on the wire but for one field the driver never sets, so one
implementation with v1's messages serves both (``drapb.services``).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import time
from typing import Any

import grpc

from computedomains.api import constants
from computedomains.drapb import dra_v1_pb2, pluginregistration_v1_pb2, services
from computedomains.kubeletplugin import claims, driver, metrics

SUPPORTED_SERVICES = tuple(services.DRA)
_KUBELET_CALL_TIMEOUT = 45.0
_SAFETY = 2.0
"""Seconds kept in hand to answer before the kubelet gives up on the call."""


class Registration:
    """Answers the kubelet's plugin watcher."""

    def __init__(self, dra_socket: pathlib.Path) -> None:
        self._endpoint = str(dra_socket)
        self.registered = False
        self.error = ""

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Say we are the compute-domain DRA driver and where our service is."""
        return pluginregistration_v1_pb2.PluginInfo(
            type="DRAPlugin",
            name=constants.DRIVER_NAME,
            endpoint=self._endpoint,
            supported_versions=list(SUPPORTED_SERVICES),
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Remember whether the kubelet accepted us (reported by the readiness probe)."""
        self.registered = bool(request.plugin_registered)
        self.error = str(request.error)
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class DRAService:
    """NodePrepareResources/NodeUnprepareResources over the driver, for both API versions."""

    def __init__(self, core: driver.Driver, stats: metrics.PluginMetrics) -> None:
        self._driver = core
        self._stats = stats

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Prepare each claim; one claim's failure never fails the others."""
        remaining = context.time_remaining() or _KUBELET_CALL_TIMEOUT
        deadline = time.monotonic() + max(0.5, remaining - _SAFETY)
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            ref = claims.ClaimRef(claim.uid, claim.namespace, claim.name)
            with self._stats.observe("prepare"):
                result = self._driver.prepare(ref, deadline=deadline)
            entry = response.claims[claim.uid]
            if result.error:
                entry.error = result.error
                continue
            for device in result.devices:
                entry.devices.add(
                    request_names=list(device.requests),
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=list(device.cdi_ids),
                )
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Unprepare each claim; unknown claims succeed."""
        response = dra_v1_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            with self._stats.observe("unprepare"):
                result = self._driver.unprepare(
                    claims.ClaimRef(claim.uid, claim.namespace, claim.name)
                )
            response.claims[claim.uid].error = result.error
        return response


_SUN_PATH_MAX = 107
"""Longest unix socket path the kernel accepts (sun_path is 108 bytes with the NUL)."""


def _listen(socket_path: pathlib.Path, workers: int) -> grpc.Server:
    if len(str(socket_path).encode()) > _SUN_PATH_MAX:
        raise SystemExit(
            f"socket path {socket_path} is longer than {_SUN_PATH_MAX} bytes; "
            "unix sockets cannot live there: use shorter kubelet directories"
        )
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    socket_path.unlink(missing_ok=True)  # a stale socket from a previous run blocks bind
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=workers))
    server.add_insecure_port(f"unix://{socket_path}")
    return server


def serve_dra(
    socket_path: pathlib.Path, core: driver.Driver, stats: metrics.PluginMetrics, *, workers: int
) -> grpc.Server:
    """Start the DRA service (v1 and v1beta1) on ``socket_path`` with ``workers`` threads."""
    server = _listen(socket_path, workers=workers)
    implementation = DRAService(core, stats)
    for service in services.DRA.values():
        services.serve(server, service, implementation)
    server.start()
    return server


def serve_registration(socket_path: pathlib.Path, registration: Registration) -> grpc.Server:
    """Start the registration service; the kubelet finds us once this socket exists."""
    server = _listen(socket_path, workers=4)
    services.serve(server, services.REGISTRATION, registration)
    server.start()
    return server
