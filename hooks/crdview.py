"""What migration needs to know of one live CRD, read from the CRD itself (no version is assumed).

The storage version, the versions still recorded as stored, the storage version's schema and
where its objects live: all come from the CRD the API server serves, so the hooks work the
same whichever version the chart made the storage one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import resources


class CRDError(ValueError):
    """The CRD cannot be migrated as it is (no storage version, no schema)."""


@dataclasses.dataclass(frozen=True)
class CRDView:
    """One CRD as migration sees it."""

    name: str
    uid: str
    resource_version: str
    kind: str
    group: str
    plural: str
    namespaced: bool
    storage_version: str
    served_versions: tuple[str, ...]
    stored_versions: tuple[str, ...]
    """``status.storedVersions``: every version objects may still be stored at."""
    schema: Mapping[str, Any]
    """The storage version's ``openAPIV3Schema``."""
    status_subresource: bool
    """The storage version has the status subresource (status writes go through /status)."""

    @property
    def resource(self) -> resources.Resource:
        """The objects' resource at the storage version."""
        return self.at(self.storage_version)

    def at(self, version: str) -> resources.Resource:
        """The objects' resource at ``version``."""
        return resources.Resource(self.group, version, self.plural, self.namespaced)

    @property
    def needs_rewrite(self) -> bool:
        """Objects may be stored at another version than the storage one."""
        return tuple(self.stored_versions) != (self.storage_version,)

    def identity(self) -> dict[str, Any]:
        """What makes this CRD's migration the same one after a restart."""
        return {
            "name": self.name,
            "uid": self.uid,
            "storageVersion": self.storage_version,
            "storedVersions": list(self.stored_versions),
        }


def view(crd: Mapping[str, Any]) -> CRDView:
    """The :class:`CRDView` of a CRD object; :class:`CRDError` when it has no storage version."""
    meta = crd.get("metadata") or {}
    spec = crd.get("spec") or {}
    name = str(meta.get("name") or "")
    versions = list(spec.get("versions") or [])
    storage = [v for v in versions if v.get("storage")]
    if len(storage) != 1:
        raise CRDError(f"CRD {name}: expected one storage version, found {len(storage)}")
    version = storage[0]
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, Mapping):
        raise CRDError(f"CRD {name}: storage version {version.get('name')} has no schema")
    status = crd.get("status") or {}
    names = spec.get("names") or {}
    return CRDView(
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        kind=str(names.get("kind") or ""),
        group=str(spec.get("group") or ""),
        plural=str(names.get("plural") or ""),
        namespaced=spec.get("scope") == "Namespaced",
        storage_version=str(version["name"]),
        served_versions=tuple(str(v["name"]) for v in versions if v.get("served")),
        stored_versions=tuple(str(v) for v in status.get("storedVersions") or []),
        schema=schema,
        status_subresource="status" in (version.get("subresources") or {}),
    )


def migration_id(views: Sequence[CRDView]) -> str:
    """A short stable name of the migration of ``views``.

    Equal after a restart; new once the CRDs' storage or stored versions change (a later
    migration).
    """
    canonical = json.dumps(
        sorted((v.identity() for v in views), key=lambda i: i["name"]),
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def pruned_status(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The CRD with ``status.storedVersions`` cut to the storage version (a /status PUT body).

    Keeps the CRD's resourceVersion, so the write fails rather than override a CRD changed
    since it was read.
    """
    storage = view(crd).storage_version
    body = dict(crd)
    body["status"] = {**(crd.get("status") or {}), "storedVersions": [storage]}
    return body


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for cluster objects): the order the API server lists in."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))
