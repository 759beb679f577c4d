"""Apply manifests of any kind (server-side apply), finding their API paths by discovery."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from computedomains.kube import client

FIELD_MANAGER = "computedomains"


@dataclasses.dataclass(frozen=True)
class Resource:
    """Where objects of one kind live."""

    base: str
    """``/api/v1`` or ``/apis/<group>/<version>``."""
    plural: str
    namespaced: bool

    def path(self, name: str, namespace: str) -> str:
        """The object's API path."""
        scope = f"/namespaces/{namespace}" if self.namespaced else ""
        return f"{self.base}{scope}/{self.plural}/{name}"


class Discovery:
    """Caches the server's API groups, one request per group version asked about."""

    def __init__(self, api: client.Client) -> None:
        self._api = api
        self._known: dict[str, dict[str, Resource]] = {}

    def resource(self, api_version: str, kind: str) -> Resource:
        """The resource serving ``kind`` of ``api_version``; KeyError names what is missing."""
        if api_version not in self._known:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            listing = self._api.get(base).get("resources", [])
            self._known[api_version] = {
                r["kind"]: Resource(base, r["name"], bool(r.get("namespaced")))
                for r in listing
                if "/" not in r["name"]  # subresources
            }
        try:
            return self._known[api_version][kind]
        except KeyError:
            raise KeyError(f"the API server serves no {kind} in {api_version}") from None


def apply(api: client.Client, manifests: Iterable[dict[str, Any]], *, namespace: str) -> list[str]:
    """Server-side apply every manifest (idempotent); returns ``kind/name`` of each."""
    discovery = Discovery(api)
    applied = []
    for manifest in manifests:
        resource = discovery.resource(manifest["apiVersion"], manifest["kind"])
        meta = manifest["metadata"]
        ns = meta.get("namespace", namespace) if resource.namespaced else ""
        api.request(
            "PATCH",
            resource.path(meta["name"], ns),
            body=manifest,
            content_type="application/apply-patch+yaml",  # JSON is YAML
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        applied.append(f"{manifest['kind']}/{meta['name']}")
    return applied
