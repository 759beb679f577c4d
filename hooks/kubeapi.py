"""Plain-dict requests over the official dynamic client, for the migration hooks.

Migration reads and writes whatever version the live CRD names, so it builds paths from
:class:`computedomains.api.resources.Resource` and sends JSON bodies as they are: no generated
model sits between a stored object and the write that puts it back, and nothing is dropped
on the way. Errors are the dynamic client's (``NotFoundError``, ``ConflictError``,
``GoneError``, …), all :class:`kubernetes.client.exceptions.ApiException`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes.dynamic
from kubernetes.dynamic import exceptions

NotFound = exceptions.NotFoundError
Conflict = exceptions.ConflictError
Gone = exceptions.GoneError
AlreadyExists = exceptions.ConflictError
"""A create of an existing object answers 409, like a write conflict."""
ApiError = exceptions.DynamicApiError

MERGE_PATCH = "application/merge-patch+json"


def _plain(_client: Any, document: Any) -> Any:
    return document


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a list: its items and the token of the next page ("" after the last)."""

    items: list[dict[str, Any]]
    continue_token: str
    resource_version: str


class Api:
    """Requests by path, bodies and answers as plain dicts."""

    def __init__(self, client: kubernetes.dynamic.DynamicClient) -> None:
        self._client = client

    def _request(self, method: str, path: str, **params: Any) -> Any:
        return self._client.request(method, path, serializer=_plain, **params)

    def get(self, path: str) -> dict[str, Any]:
        """GET one object."""
        document: dict[str, Any] = self._request("get", path)
        return document

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        """GET one object; None when it does not exist."""
        try:
            return self.get(path)
        except NotFound:
            return None

    def list_page(
        self, path: str, *, limit: int, continue_token: str = "", label_selector: str = ""
    ) -> Page:
        """One page of a collection (``limit`` items at most, from ``continue_token``)."""
        params: dict[str, Any] = {"limit": limit}
        if continue_token:
            params["_continue"] = continue_token
        if label_selector:
            params["label_selector"] = label_selector
        document = self._request("get", path, **params)
        meta = document.get("metadata") or {}
        return Page(
            items=list(document.get("items") or []),
            continue_token=str(meta.get("continue") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def list_all(self, path: str, *, limit: int, label_selector: str = "") -> Iterator[Page]:
        """Every page of a collection, in order."""
        token = ""
        while True:
            page = self.list_page(
                path, limit=limit, continue_token=token, label_selector=label_selector
            )
            yield page
            if not page.continue_token:
                return
            token = page.continue_token

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the collection at ``path``."""
        document: dict[str, Any] = self._request("post", path, body=dict(body))
        return document

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``body`` (its resourceVersion, if any, makes a stale write a conflict)."""
        document: dict[str, Any] = self._request("put", path, body=dict(body))
        return document

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch."""
        document: dict[str, Any] = self._request(
            "patch", path, body=dict(patch), content_type=MERGE_PATCH
        )
        return document

    def delete(self, path: str) -> None:
        """DELETE one object; gone already counts as deleted."""
        try:
            self._request("delete", path, propagation_policy="Background")
        except NotFound:
            return

    def served_versions(self, group: str) -> list[str]:
        """The versions discovery lists for API ``group`` (empty when it is not served)."""
        try:
            document = self._request("get", "/apis")
        except NotFound:
            return []
        for entry in document.get("groups") or []:
            if entry.get("name") == group:
                return [str(v.get("version")) for v in entry.get("versions") or []]
        return []
