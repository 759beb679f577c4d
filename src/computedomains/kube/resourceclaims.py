"""Read resource.k8s.io/v1 ResourceClaims in their wire form."""

from __future__ import annotations

from typing import cast

from computedomains.kube import client, wire

PATH = "/apis/resource.k8s.io/v1/resourceclaims"
"""Every claim in every namespace (for an informer)."""


def path(namespace: str, name: str) -> str:
    """The API path of one claim."""
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def read(api: client.Client, namespace: str, name: str) -> wire.ResourceClaim | None:
    """The claim ``namespace/name``, or None when it does not exist."""
    try:
        return cast(wire.ResourceClaim, api.get(path(namespace, name)))
    except client.ApiError as exc:
        if exc.status == client.NOT_FOUND:
            return None
        raise
