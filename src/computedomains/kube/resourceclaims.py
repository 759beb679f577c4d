"""Read resource.k8s.io/v1 ResourceClaims in their wire form."""

from __future__ import annotations

from typing import cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomains.kube import raw, wire

_HTTP_NOT_FOUND = 404


def read(api: client.ApiClient, namespace: str, name: str) -> wire.ResourceClaim | None:
    """The claim ``namespace/name``, or None when it does not exist."""
    try:
        found = raw.get(
            api, f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        )
    except ApiException as exc:
        if exc.status == _HTTP_NOT_FOUND:
            return None
        raise
    return cast(wire.ResourceClaim, found)
