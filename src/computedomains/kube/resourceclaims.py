"""Read resource.k8s.io/v1 ResourceClaims in their wire form."""

from __future__ import annotations

from typing import cast

from computedomains.api import resources
from computedomains.kube import client, wire

PATH = resources.RESOURCE_CLAIMS.path()
"""Every claim in every namespace (for an informer)."""


def path(namespace: str, name: str) -> str:
    """The API path of one claim."""
    return resources.RESOURCE_CLAIMS.path(name, namespace=namespace)


def read(
    api: client.Client, namespace: str, name: str, *, cached: bool = False
) -> wire.ResourceClaim | None:
    """The claim ``namespace/name``, or None when it does not exist.

    ``cached`` reads the API server's watch cache (``resourceVersion=0``: no etcd round trip,
    but possibly a moment behind), for a caller that reads again when the answer looks old.
    """
    query = {"resourceVersion": "0"} if cached else None
    return cast(wire.ResourceClaim | None, api.find(path(namespace, name), query=query))
