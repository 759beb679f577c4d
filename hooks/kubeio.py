"""The hooks' API calls: plain JSON at paths, over the components' client (``computedomains.kube``).

Hooks read and write objects of any kind and version: preflight probes for fields newer than
the generated models, and migration puts a stored object back exactly as it was read. So every
hook works with raw dicts at paths from :class:`computedomains.api.resources.Resource`, like the
components do, through the same client: its credentials, its retries of what may succeed later
(a 429, a 5xx, a lost connection) and its one taxonomy of failures (:class:`Failure`).

Failures are classes by meaning (:class:`NotFound`, :class:`Conflict`, :class:`Gone`,
:class:`Unreachable`), all :class:`ApiError`, which is the client's own error named by the
request: ``failure`` is its :class:`Failure`, and a hook's last line says what was refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from computedomains.kube import client as kube_client
from computedomains.kube.client import Failure

Obj = dict[str, Any]
PAGE = 500
"""Objects per list page: bounded memory on clusters with thousands of nodes or pods."""
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
GONE = 410
REQUEST_TIMEOUT = 120.0
"""Seconds for one request, its retries included: a list page the conversion webhook converts,
or a write behind slow admission webhooks, may take long, and a hook has no deadline of its
own but its Job's (the components' calls keep the client's 30 s)."""


class ApiError(kube_client.ApiError):
    """The API server refused a request, or gave no answer: which request, and why.

    ``failure`` is the client's :class:`Failure` for it, as for every component.
    """

    def __init__(self, method: str, path: str, cause: kube_client.ApiError) -> None:
        super().__init__(cause.status, cause.reason, cause.message, cause.body)
        self.request = f"{method} {path}"

    def __str__(self) -> str:
        said = self.message or self.reason
        return f"{self.request}: {self.status} {said}" if self.status else f"{self.request}: {said}"


class NotFound(ApiError):
    """404: the object, or the API it would live in, does not exist."""


class Conflict(ApiError):
    """409: a write at a stale resourceVersion, or a create of an object that exists already."""


class Gone(ApiError):
    """410: a list's continue token expired; the list has to start over."""


class Unreachable(ApiError):
    """No answer, after the client's retries: no connection, TLS failure, no credential."""

    @property
    def failure(self) -> Failure:
        """Always :attr:`Failure.UNREACHABLE`."""
        return Failure.UNREACHABLE


_BY_STATUS: Mapping[int, type[ApiError]] = {404: NotFound, 409: Conflict, GONE: Gone}


def failure(method: str, path: str, exc: Exception) -> ApiError:
    """The hook failure for what the client raised on ``method path``."""
    if isinstance(exc, kube_client.ApiError):
        return _BY_STATUS.get(exc.status, ApiError)(method, path, exc)
    return Unreachable(method, path, kube_client.ApiError(0, "no answer", str(exc)))


@dataclasses.dataclass(frozen=True)
class Page:
    """One page of a list: its items and the token of the next page ("" after the last)."""

    items: list[Obj]
    continue_token: str
    resource_version: str


class Api:
    """Requests by path; bodies and answers are plain dicts."""

    def __init__(self, client: kube_client.Client) -> None:
        self._client = client

    def _request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "", **query: str
    ) -> Obj:
        try:
            return self._client.request(
                method,
                path,
                query={k: v for k, v in query.items() if v} or None,
                body=body,
                content_type=content_type or "application/json",
                timeout=REQUEST_TIMEOUT,
            )
        except kube_client.API_ERRORS as exc:
            raise failure(method, path, exc) from None

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
            limit=str(limit),
            labelSelector=label_selector,
            **{"continue": continue_token},
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
        return self._request("POST", path, body=dict(body), dryRun="All" if dry_run else "")

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
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._request("DELETE", path, body)
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
