"""The hooks' few API calls, as plain JSON over the official client's transport.

Hooks read objects of any kind and version and print what they found, so they work with raw
dicts at paths from :class:`computedomains.api.resources.Resource`, like the components do,
rather than with the generated models (which drop fields newer than the client, the very
fields preflight probes for). :class:`ApiError` is the one failure a hook catches: it names the
request and the server's answer, so the hook's last line says what was refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import kubernetes.dynamic

from computedomains.api import resources

Obj = dict[str, Any]

CRDS = resources.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
DEVICE_CLASSES = resources.Resource("resource.k8s.io", "v1", "deviceclasses", False)
DAEMON_SETS = resources.Resource("apps", "v1", "daemonsets", True)
DEPLOYMENTS = resources.Resource("apps", "v1", "deployments", True)
NOT_FOUND = 404
PAGE = 500
"""Objects per list page: bounded memory on clusters with thousands of nodes or pods."""
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The API server refused a request (or could not be reached)."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status


class Api:
    """JSON requests to the API server through the official client's dynamic transport."""

    def __init__(self, client: kubernetes.dynamic.DynamicClient) -> None:
        self._client = client

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Obj:
        """One request; its JSON answer, :class:`ApiError` on any refusal."""
        try:
            response = self._client.request(method, path, body=body, serialize=False, **params)
        except kubernetes.client.ApiException as exc:
            raise ApiError(method, path, int(exc.status or 0), _message(exc)) from None
        data = response.data
        return json.loads(data) if data else {}

    def get(self, path: str) -> Obj | None:
        """The object at ``path``; None when it does not exist (or its API is not served)."""
        try:
            return self.request("GET", path)
        except ApiError as exc:
            if exc.status == NOT_FOUND:
                return None
            raise

    def list(self, path: str, *, label_selector: str | None = None) -> Iterator[Obj]:
        """Every object of the collection at ``path``, page by page."""
        token: str | None = None
        while True:
            page = self.request(
                "GET", path, limit=PAGE, _continue=token, label_selector=label_selector or None
            )
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return

    def patch(self, path: str, body: Obj, *, content_type: str = MERGE_PATCH) -> Obj:
        """A merge patch (or ``content_type``) of the object at ``path``."""
        return self.request("PATCH", path, body=body, content_type=content_type)

    def create(self, path: str, body: Obj, *, dry_run: bool = False) -> Obj:
        """Create ``body`` in the collection at ``path``; only admit it with ``dry_run``."""
        return self.request("POST", path, body=body, dry_run="All" if dry_run else None)

    def delete(self, path: str, *, propagation: str = "Foreground") -> bool:
        """Delete the object at ``path``; whether it was there."""
        try:
            self.request("DELETE", path, propagation_policy=propagation)
        except ApiError as exc:
            if exc.status == NOT_FOUND:
                return False
            raise
        return True


def _message(exc: kubernetes.client.ApiException) -> str:
    # The server's Status says what was wrong (forbidden for whom, invalid which field).
    try:
        status = json.loads(exc.body or "")
    except ValueError:
        return str(exc.reason or "")
    return str(status.get("message") or exc.reason or "") if isinstance(status, dict) else ""


def name(obj: Obj) -> str:
    """``metadata.name``."""
    return str(obj["metadata"]["name"])


def labels(obj: Obj) -> dict[str, str]:
    """``metadata.labels`` (empty when there are none)."""
    return dict(obj["metadata"].get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    """``metadata.annotations`` (empty when there are none)."""
    return dict(obj["metadata"].get("annotations") or {})
