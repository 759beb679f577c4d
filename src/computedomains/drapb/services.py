"""The kubelet's two gRPC services, served and called by name over the generated messages.

Only the messages are generated (``make protos``); every server (the plugin, the simulated
plain DRA driver, test fakes) and every client (the simulated kubelet, the liveness probe)
reaches the services through :func:`serve` and :class:`Client`. DRA v1beta1 is v1 on the wire
but for ``Device.share_id`` (field 5), which v1 added and this driver never sets (a v1beta1
kubelet would skip it as an unknown field), so v1's messages serve and call both versions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import message

from computedomains.drapb import dra_v1_pb2 as dra
from computedomains.drapb import pluginregistration_v1_pb2 as registration


@dataclasses.dataclass(frozen=True)
class Method:
    """One unary method: its name and its message types."""

    name: str
    request: type[message.Message]
    response: type[message.Message]


@dataclasses.dataclass(frozen=True)
class Service:
    """One gRPC service: its full name (package and service) and its methods."""

    name: str
    methods: tuple[Method, ...]


REGISTRATION = Service(
    "pluginregistration.Registration",
    (
        Method("GetInfo", registration.InfoRequest, registration.PluginInfo),
        Method(
            "NotifyRegistrationStatus",
            registration.RegistrationStatus,
            registration.RegistrationStatusResponse,
        ),
    ),
)
"""The kubelet plugin watcher's handshake, answered on the registration socket."""

_DRA_METHODS = (
    Method(
        "NodePrepareResources", dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse
    ),
    Method(
        "NodeUnprepareResources",
        dra.NodeUnprepareResourcesRequest,
        dra.NodeUnprepareResourcesResponse,
    ),
)
DRA = {
    "v1.DRAPlugin": Service("k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", _DRA_METHODS),
    "v1beta1.DRAPlugin": Service("k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin", _DRA_METHODS),
}
"""The DRA service by the name a plugin gives its version in ``PluginInfo.supported_versions``
(kubelets since 1.34 speak both and prefer v1; 1.32 and 1.33 speak only v1beta1)."""


def serve(server: grpc.Server, service: Service, implementation: object) -> None:
    """Answer ``service`` on ``server`` with ``implementation``'s methods of the same names."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        method.name: grpc.unary_unary_rpc_method_handler(
            getattr(implementation, method.name),
            request_deserializer=method.request.FromString,
            response_serializer=method.response.SerializeToString,
        )
        for method in service.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.name, handlers),))


class Client:
    """Calls one service's methods over one channel."""

    def __init__(self, channel: grpc.Channel, service: Service) -> None:
        self._calls: dict[str, Callable[..., Any]] = {
            method.name: channel.unary_unary(
                f"/{service.name}/{method.name}",
                request_serializer=method.request.SerializeToString,
                response_deserializer=method.response.FromString,
            )
            for method in service.methods
        }

    def call(self, method: str, request: message.Message, *, timeout: float) -> Any:
        """One call of ``method``; raises ``grpc.RpcError`` when it fails."""
        return self._calls[method](request, timeout=timeout)
