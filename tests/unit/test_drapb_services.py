"""The services are served and called by their kubelet names, both DRA versions alike."""

from __future__ import annotations

import concurrent.futures
import pathlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from computedomains.drapb import dra_v1_pb2, services


class _Echo:
    """Answers a prepare with one device per claim, named after the service that answered."""

    def __init__(self, label: str) -> None:
        self._label = label

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        response = dra_v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].devices.add(device_name=self._label)
        return response

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        return dra_v1_pb2.NodeUnprepareResourcesResponse()


@pytest.fixture
def channel(tmp_path: pathlib.Path) -> Iterator[grpc.Channel]:
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    for version, service in services.DRA.items():
        services.serve(server, service, _Echo(version))
    socket = tmp_path / "dra.sock"
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{socket}") as opened:
            yield opened
    finally:
        server.stop(grace=None)


@pytest.mark.parametrize("version", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
def test_each_version_reaches_its_own_service(channel: grpc.Channel, version: str) -> None:
    request = dra_v1_pb2.NodePrepareResourcesRequest(claims=[dra_v1_pb2.Claim(uid="u1")])
    answer = services.Client(channel, services.DRA[version]).call(
        "NodePrepareResources", request, timeout=10
    )
    assert [d.device_name for d in answer.claims["u1"].devices] == [version]


def test_a_service_not_served_is_unimplemented(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        services.Client(channel, services.REGISTRATION).call(
            "NotifyRegistrationStatus",
            services.REGISTRATION.methods[1].request(),
            timeout=10,
        )
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
