"""The hooks' API calls, as plain JSON over the official dynamic client's transport.

Hooks read and write objects of any kind and version: preflight probes for fields newer than
the generated models, and migration puts a stored object back exactly as it was read. So every
hook works with raw dicts at paths from :class:`computedomains.api.resources.Resource`, like the
components do, and no generated model sits between the server and the hook to drop fields.

Failures are classes by meaning (:class:`NotFound`, :class:`Conflict`, :class:`Gone`), all
:class:`ApiError`, which names the request and the server's answer, so a hook's last line says
what was refused. Only this module reads status codes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

import kubernetes.client
import kubernetes.dynamic

Obj = dict[str, Any]
PAGE = 500
"""Objects per list page: bounded memory on clusters with thousands of nodes or pods."""
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The API server refused a request: which request, with the server's status and message."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {message}")


class NotFound(ApiError):
    """404: the object, or the API it would live in, does not exist."""


class Conflict(ApiError):
    """409: a write at a stale resourceVersion, or a create of an object that exists already."""


class Gone(ApiError):
    """410: a list's continue token expired; the list has to start over."""


_BY_STATUS: Mapping[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone}


def failure(method: str, path: str, exc: kubernetes.client.ApiException) -> ApiError:
    """The failure class for the client's exception, named by the request and the message."""
    status = int(exc.status or 0)
    return _BY_STATUS.get(status, ApiError)(method, path, status, _message(exc))


def _message(exc: kubernetes.client.ApiException) -> str:
    # The server's Status says what was wrong (forbidden for whom, invalid which field).
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        return str(exc.reason or "")
    return str(status.get("message") or exc.reason or "") if isinstance(status, dict) else ""


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a list: its items and the token of the next page ("" after the last)."""

    items: list[Obj]
    continue_token: str
    resource_version: str


class Api:
    """Requests by path; bodies and answers are plain dicts."""

    def __init__(self, client: kubernetes.dynamic.DynamicClient) -> None:
        self._client = client

    def _request(self, method: str, path: str, body: Any = None, **params: Any) -> Obj:
        try:
            response = self._client.request(method, path, body=body, serialize=False, **params)
        except kubernetes.client.ApiException as exc:
            raise failure(method, path, exc) from None
        data = response.data
        document: Obj = json.loads(data) if data else {}
        return document

    def get(self, path: str) -> Obj:
        """The object (or discovery document) at ``path``; :class:`NotFound` when there is none."""
        return self._request("GET", path)

    def get_or_none(self, path: str) -> Obj | None:
        """The object at ``path``; None when it does not exist (or its API is not served)."""
        try:
            return self.get(path)
        except NotFound:
            return None

    def list_page(
        self, path: str, *, limit: int = PAGE, continue_token: str = "", label_selector: str = ""
    ) -> Page:
        """One page of a collection (``limit`` items at most, from ``continue_token``)."""
        document = self._request(
            "GET",
            path,
            limit=limit,
            _continue=continue_token or None,
            label_selector=label_selector or None,
        )
        meta = document.get("metadata") or {}
        return Page(
            items=list(document.get("items") or []),
            continue_token=str(meta.get("continue") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def list_all(self, path: str, *, limit: int = PAGE, label_selector: str = "") -> Iterator[Page]:
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

    def list_items(self, path: str, *, label_selector: str = "") -> Iterator[Obj]:
        """Every object of the collection at ``path``, read page by page."""
        for page in self.list_all(path, label_selector=label_selector):
            yield from page.items

    def create(self, path: str, body: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        """POST ``body`` to the collection at ``path``; with ``dry_run`` only admit it."""
        return self._request("POST", path, body=dict(body), dry_run="All" if dry_run else None)

    def replace(self, path: str, body: Mapping[str, Any]) -> Obj:
        """PUT ``body`` (its resourceVersion, if any, makes a stale write a :class:`Conflict`)."""
        return self._request("PUT", path, body=dict(body))

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Obj:
        """A JSON merge patch of the object at ``path``."""
        return self._request("PATCH", path, body=dict(patch), content_type=MERGE_PATCH)

    def strategic_patch(self, path: str, patch: Mapping[str, Any]) -> Obj:
        """A strategic merge patch (lists merge by their key, e.g. conditions by type)."""
        return self._request("PATCH", path, body=dict(patch), content_type=STRATEGIC_PATCH)

    def delete(self, path: str, *, propagation: str = "Background", uid: str = "") -> bool:
        """Delete the object at ``path``; whether it was there (gone already counts as done).

        With ``uid``, only that very object: a newer one of the same name is a
        :class:`Conflict`.
        """
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self._request("DELETE", path, body, propagation_policy=propagation)
        except NotFound:
            return False
        return True

    def served_versions(self, group: str) -> list[str]:
        """The versions discovery lists for API ``group`` (empty when it is not served)."""
        for entry in (self.get_or_none("/apis") or {}).get("groups") or []:
            if entry.get("name") == group:
                return [str(v.get("version")) for v in entry.get("versions") or []]
        return []


def name(obj: Obj) -> str:
    """``metadata.name``."""
    return str(obj["metadata"]["name"])


def namespace(obj: Obj) -> str:
    """``metadata.namespace`` ("" for a cluster-scoped object)."""
    return str(obj["metadata"].get("namespace") or "")


def labels(obj: Obj) -> dict[str, str]:
    """``metadata.labels`` (empty when there are none)."""
    return dict(obj["metadata"].get("labels") or {})


def condition(obj: Obj, kind: str) -> Obj | None:
    """The ``status.conditions`` entry of type ``kind``; None when there is none."""
    found: list[Obj] = [
        c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind
    ]
    return found[0] if found else None


def annotations_of(obj: Obj) -> dict[str, str]:
    """``metadata.annotations`` (empty when there are none)."""
    return dict(obj["metadata"].get("annotations") or {})
