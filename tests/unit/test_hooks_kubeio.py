"""The hooks' API failures: one class per answer a hook acts on, named by the request."""

from __future__ import annotations

import json

import kubernetes.client
import pytest
from kubernetes.dynamic import exceptions as dynamic_exceptions

from computedomains.hooks import kubeio


def answer(status: int, body: str = "", reason: str = "") -> kubernetes.client.ApiException:
    exc = kubernetes.client.ApiException(status=status, reason=reason)
    exc.body = body
    return exc


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, kubeio.NotFound),
        (409, kubeio.Conflict),
        (410, kubeio.Gone),
        (403, kubeio.ApiError),
        (422, kubeio.ApiError),
        (500, kubeio.ApiError),
    ],
)
def test_each_answer_has_its_class(status: int, cls: type[kubeio.ApiError]) -> None:
    failure = kubeio.failure("GET", "/api/v1/nodes/n", answer(status))
    assert type(failure) is cls
    assert isinstance(failure, kubeio.ApiError)


def test_the_message_names_the_request_and_the_servers_reason() -> None:
    body = json.dumps({"kind": "Status", "message": 'configmaps "x" is forbidden: no'})
    failure = kubeio.failure("PUT", "/api/v1/namespaces/d/configmaps/x", answer(403, body))
    assert (
        str(failure) == 'PUT /api/v1/namespaces/d/configmaps/x: 403 configmaps "x" is forbidden: no'
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("", "GET /version: 503 Service Unavailable"),
        ("<html>proxy error</html>", "GET /version: 503 Service Unavailable"),
        (json.dumps({"kind": "Status"}), "GET /version: 503 Service Unavailable"),
    ],
)
def test_without_a_status_message_the_reason_is_named(body: str, expected: str) -> None:
    failure = kubeio.failure("GET", "/version", answer(503, body, "Service Unavailable"))
    assert str(failure) == expected


def test_the_dynamic_clients_own_exceptions_map_the_same() -> None:
    # The dynamic client raises its subclasses of ApiException; the status decides alone.
    raised = dynamic_exceptions.api_exception(answer(409))  # type: ignore[no-untyped-call]
    assert isinstance(raised, kubernetes.client.ApiException)
    assert type(kubeio.failure("POST", "/api/v1/pods", raised)) is kubeio.Conflict
