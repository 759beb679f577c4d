"""Take, reuse and read back the snapshot ConfigMaps (their shape: :mod:`.snapshotplan`)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

from computedomains import rfc3339
from computedomains.api import resources
from computedomains.hooks import crdview, kubeio, report, snapshotplan


@dataclasses.dataclass(frozen=True)
class Taken:
    """A snapshot that exists now, and the objects it listed (None when it was reused)."""

    manifest: snapshotplan.Manifest
    objects: dict[str, list[dict[str, Any]]] | None
    """Per CRD name, the objects as listed (live, with managedFields), when freshly taken."""


def list_objects(api: kubeio.Api, crd: crdview.CRDView, *, page_size: int) -> list[dict[str, Any]]:
    """Every object of ``crd`` in every namespace, read at its storage version."""
    objects: list[dict[str, Any]] = []
    for page in api.list_all(crd.resource.path(), limit=page_size):
        objects.extend(page.items)
    return objects


def _put(api: kubeio.Api, body: dict[str, Any]) -> None:
    """Create or overwrite one ConfigMap of the snapshot."""
    meta = body["metadata"]
    try:
        api.create(resources.CONFIG_MAPS.path(namespace=meta["namespace"]), body)
    except kubeio.Conflict:  # a create of an existing object answers 409
        api.replace(resources.CONFIG_MAPS.path(meta["name"], namespace=meta["namespace"]), body)


def take(
    api: kubeio.Api,
    crds: Sequence[crdview.CRDView],
    *,
    namespace: str,
    prefix: str,
    page_size: int,
    out: report.Report,
    now: datetime.datetime,
) -> Taken:
    """The snapshot of this migration: the existing complete one, else a new one."""
    migration = crdview.migration_id(crds)
    existing = snapshotplan.manifest_of(
        api.get_or_none(
            resources.CONFIG_MAPS.path(snapshotplan.manifest_name(prefix), namespace=namespace)
        )
    )
    if snapshotplan.reusable(existing, migration):
        assert existing is not None
        out.step(
            f"snapshot: reusing {namespace}/{prefix}-* ({existing.total} objects, "
            f"{len(existing.chunks)} ConfigMaps, taken {existing.taken_at})"
        )
        return Taken(existing, None)
    if existing is not None:
        out.step(f"snapshot: {namespace}/{prefix}-* belongs to an earlier migration; replacing it")
    # The manifest goes first (it marks a complete snapshot) and comes back last.
    api.delete(resources.CONFIG_MAPS.path(snapshotplan.manifest_name(prefix), namespace=namespace))
    listed: dict[str, list[dict[str, Any]]] = {}
    saved: list[dict[str, Any]] = []
    for crd in crds:
        listed[crd.name] = list_objects(api, crd, page_size=page_size)
        saved.extend(snapshotplan.saved_form(o) for o in listed[crd.name])
        out.step(
            f"snapshot: {crd.name}: {len(listed[crd.name])} objects read at {crd.storage_version}"
        )
    chunks = snapshotplan.pack(saved)
    for index, chunk in enumerate(chunks):
        _put(api, snapshotplan.chunk_configmap(prefix, index, chunk, namespace=namespace))
    _delete_stale_chunks(api, namespace=namespace, prefix=prefix, keep=len(chunks))
    manifest = snapshotplan.Manifest(
        migration=migration,
        taken_at=rfc3339.stamp(now),
        crds=tuple({**c.identity(), "resourceVersion": c.resource_version} for c in crds),
        counts={name: len(objs) for name, objs in listed.items()},
        chunks=tuple(snapshotplan.digest(c) for c in chunks),
    )
    _put(api, snapshotplan.manifest_configmap(prefix, manifest, namespace=namespace))
    out.step(
        f"snapshot: saved {manifest.total} objects in {len(chunks)} ConfigMaps "
        f"{namespace}/{prefix}-0..{max(len(chunks) - 1, 0)} and "
        f"{snapshotplan.manifest_name(prefix)} (restore: computedomains hooks restore "
        f"--namespace {namespace} --snapshot-prefix {prefix})"
    )
    return Taken(manifest, listed)


def _delete_stale_chunks(api: kubeio.Api, *, namespace: str, prefix: str, keep: int) -> None:
    """Remove chunks past ``keep`` left by an earlier, larger snapshot under the prefix."""
    selector = (
        f"{snapshotplan.SNAPSHOT_LABEL}={prefix},"
        f"{snapshotplan.PART_LABEL}={snapshotplan.OBJECTS_PART}"
    )
    current = {snapshotplan.chunk_name(prefix, i) for i in range(keep)}
    for page in api.list_all(
        resources.CONFIG_MAPS.path(namespace=namespace), limit=100, label_selector=selector
    ):
        for item in page.items:
            name = item["metadata"]["name"]
            if name not in current:
                api.delete(resources.CONFIG_MAPS.path(name, namespace=namespace))


def load(
    api: kubeio.Api, *, namespace: str, prefix: str
) -> tuple[snapshotplan.Manifest, list[dict[str, Any]]]:
    """The complete snapshot under ``prefix`` and its objects (hashes checked)."""
    manifest = snapshotplan.manifest_of(
        api.get_or_none(
            resources.CONFIG_MAPS.path(snapshotplan.manifest_name(prefix), namespace=namespace)
        )
    )
    if manifest is None:
        raise snapshotplan.SnapshotError(
            f"no complete snapshot {namespace}/{snapshotplan.manifest_name(prefix)}: list the "
            f"snapshots with kubectl -n {namespace} get configmaps -l {snapshotplan.SNAPSHOT_LABEL}"
        )
    chunks = [
        snapshotplan.chunk_of(
            api.get(
                resources.CONFIG_MAPS.path(snapshotplan.chunk_name(prefix, i), namespace=namespace)
            )
        )
        for i in range(len(manifest.chunks))
    ]
    snapshotplan.verify(manifest, chunks)
    return manifest, [obj for chunk in chunks for obj in snapshotplan.unpack(chunk)]
