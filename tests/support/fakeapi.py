"""An in-memory stand-in for :class:`computedomains.kube.client.Client` in unit tests.

Objects are stored by path with a resourceVersion that grows on every write; a PUT or a
merge patch carrying a stale resourceVersion gets a 409, as from the API server. Every call
is recorded, so tests count reads and writes.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from computedomains.kube import client


@dataclasses.dataclass
class FakeApi:
    """Objects by path (``<collection>/<name>``), and the calls made."""

    objects: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    calls: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    version: int = 100
    conflicts_to_inject: int = 0
    """The next writes answer 409 this many times (someone else wrote in between)."""

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return obj

    def _check_version(self, path: str, body: dict[str, Any]) -> None:
        if self.conflicts_to_inject:
            self.conflicts_to_inject -= 1
            self.objects[path] = self._bump(self.objects[path])
            raise client.ApiError(409, "Conflict", "injected")
        sent = body.get("metadata", {}).get("resourceVersion")
        stored = self.objects[path]["metadata"]["resourceVersion"]
        if sent is not None and sent != stored:
            raise client.ApiError(409, "Conflict", f"{sent} is not {stored}")

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append(("GET", path))
        if path not in self.objects:
            raise client.ApiError(404, "NotFound", path)
        return copy.deepcopy(self.objects[path])

    def find(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        try:
            return self.get(path, **kwargs)
        except client.ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        self.calls.append(("POST", path))
        full = f"{path}/{body['metadata']['name']}"
        if full in self.objects:
            raise client.ApiError(409, "AlreadyExists", full)
        self.objects[full] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[full])

    def replace(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise client.ApiError(404, "NotFound", path)
        self._check_version(target, body)
        self.objects[target] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[target])

    def patch(self, path: str, body: Any, **_: Any) -> dict[str, Any]:
        """A JSON merge patch (``None`` removes a key), of the object or its status."""
        self.calls.append(("PATCH", path))
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise client.ApiError(404, "NotFound", path)
        self._check_version(target, body)
        self.objects[target] = self._bump(_merge(copy.deepcopy(self.objects[target]), body))
        return copy.deepcopy(self.objects[target])

    def apply(self, path: str, body: Any, *, field_manager: str, **_: Any) -> dict[str, Any]:
        """A server-side apply, merged like a merge patch; records the manager's ownership of
        the top-level keys of ``spec`` it names (enough for the code that reads it)."""
        self.calls.append(("APPLY", path))
        if path not in self.objects:
            raise client.ApiError(404, "NotFound", path)
        self._check_version(path, body)
        content = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}
        merged = _merge(copy.deepcopy(self.objects[path]), content)
        spec: dict[str, Any] = content.get("spec", {})
        owned: dict[str, Any] = {f"f:{k}": {f"f:{sub}": {} for sub in v} for k, v in spec.items()}
        entry = {"manager": field_manager, "operation": "Apply",
                 "fieldsV1": {"f:spec": owned}}  # fmt: skip
        merged["metadata"].setdefault("managedFields", []).append(entry)
        self.objects[path] = self._bump(merged)
        return copy.deepcopy(self.objects[path])

    def delete(self, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append(("DELETE", path))
        if self.objects.pop(path, None) is None:
            raise client.ApiError(404, "NotFound", path)
        return {}

    def writes(self) -> list[tuple[str, str]]:
        """The calls that changed something (or tried to)."""
        return [c for c in self.calls if c[0] != "GET"]


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target
