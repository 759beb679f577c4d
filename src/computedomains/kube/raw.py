"""Plain JSON requests on the client's authenticated connection, for hot paths and watches.

The generated models cost far more than the HTTP round trip on loopback and make every field
Optional; hot paths (the kubelet plugin's prepare) and caches work on the raw JSON instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

_AUTH = ["BearerToken"]


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Mapping[str, str] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    timeout: float | None = 30,
) -> dict[str, Any]:
    """One request; returns the decoded JSON body, raises ``ApiException`` on non-2xx."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method,
        path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=body,
        auth_settings=_AUTH,
    )
    response = api.call_api(*serialized, _request_timeout=timeout)
    data = response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=response.reason, http_resp=response)
    decoded: dict[str, Any] = json.loads(data) if data else {}
    return decoded


def get(api: client.ApiClient, path: str, **kwargs: Any) -> dict[str, Any]:
    """GET ``path`` as JSON."""
    return request(api, "GET", path, **kwargs)


def stream(
    api: client.ApiClient, path: str, *, query: Mapping[str, str], timeout: float
) -> Iterator[dict[str, Any]]:
    """Watch events (decoded JSON lines) from a ``watch=1`` request until the server ends it."""
    serialized = api.param_serialize(
        "GET",
        path,
        query_params=[*query.items(), ("watch", "1")],
        header_params={"Accept": "application/json"},
        auth_settings=_AUTH,
    )
    response = api.call_api(*serialized, _request_timeout=(5, timeout))
    if not 200 <= response.status <= 299:
        response.read()  # type: ignore[no-untyped-call]
        raise ApiException(status=response.status, reason=response.reason, http_resp=response)
    raw = response.response
    try:
        pending = b""
        for chunk in raw.stream(65536, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
    finally:
        raw.release_conn()
