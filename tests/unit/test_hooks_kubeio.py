"""The hooks' API failures: one class per answer a hook acts on, named by the request, each
one of the client's own failures (one taxonomy for the components and the hooks)."""

from __future__ import annotations

import pytest
import urllib3

from computedomains.hooks import kubeio
from computedomains.kube import client as kube_client
from computedomains.kube.client import Failure


def answer(status: int, message: str = "", reason: str = "") -> kube_client.ApiError:
    return kube_client.ApiError(status, reason, message)


@pytest.mark.parametrize(
    ("status", "cls", "kind"),
    [
        (404, kubeio.NotFound, Failure.NOT_FOUND),
        (409, kubeio.Conflict, Failure.CONFLICT),
        (410, kubeio.Gone, Failure.REFUSED),
        (403, kubeio.ApiError, Failure.REFUSED),
        (422, kubeio.ApiError, Failure.REFUSED),
        (500, kubeio.ApiError, Failure.BUSY),
    ],
)
def test_each_answer_has_its_class_and_the_clients_failure_kind(
    status: int, cls: type[kubeio.ApiError], kind: Failure
) -> None:
    failure = kubeio.failure("GET", "/api/v1/nodes/n", answer(status))
    assert type(failure) is cls
    assert isinstance(failure, kube_client.ApiError)
    assert kube_client.failure(failure) is kind


def test_the_message_names_the_request_and_the_servers_message() -> None:
    failure = kubeio.failure(
        "PUT", "/api/v1/namespaces/d/configmaps/x", answer(403, 'configmaps "x" is forbidden: no')
    )
    assert (
        str(failure) == 'PUT /api/v1/namespaces/d/configmaps/x: 403 configmaps "x" is forbidden: no'
    )


def test_without_a_message_the_reason_is_named() -> None:
    failure = kubeio.failure("GET", "/version", answer(503, "", "Service Unavailable"))
    assert str(failure) == "GET /version: 503 Service Unavailable"


def test_no_answer_is_unreachable_and_names_what_happened() -> None:
    lost = urllib3.exceptions.ProtocolError("Connection aborted.")
    failure = kubeio.failure("GET", "/version", lost)
    assert isinstance(failure, kubeio.Unreachable)
    assert kube_client.failure(failure) is Failure.UNREACHABLE
    assert str(failure) == "GET /version: Connection aborted."
