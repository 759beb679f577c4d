"""``computedomains hooks restore --snapshot-prefix P``: put a migration snapshot back.

Run by hand (docs/migration.md): every saved ComputeDomain and ComputeDomainClique is created
when missing, or gets its saved spec, labels, annotations and status back
(:mod:`.restoreplan`). Objects are written at the apiVersion they were saved at.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any

from computedomains import flags
from computedomains.api import resources
from computedomains.hooks import (
    client,
    crdview,
    kubeio,
    migrate,
    report,
    restoreplan,
    snapshotplan,
)
from computedomains.hooks import snapshot as snapshots


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.Connection):
    """``--kubeconfig``, ``--namespace`` (where the snapshot is), ``--snapshot-prefix``."""

    prefix: str = flags.field(
        dataclasses.replace(migrate.SNAPSHOT_PREFIX, default=None, required=True)
    )


STOP = report.NEVER
"""Restore reports each object it could not write and goes on."""


def run(api: kubeio.Api, settings: Settings, out: report.Report) -> int:
    """Restore; the exit code."""
    return restore(api, namespace=settings.namespace, prefix=settings.prefix, out=out)


def _crds(api: kubeio.Api, names: list[str]) -> dict[str, crdview.CRDView]:
    """CRD views by "group/Kind" of the saved objects' kinds."""
    views = migrate.read_crds(api, names)
    return {f"{v.group}/{v.kind}": v for v in views}


def restore(api: kubeio.Api, *, namespace: str, prefix: str, out: report.Report) -> int:
    """Restore every object of the snapshot; 0 when every write went through."""
    try:
        manifest, objects = snapshots.load(api, namespace=namespace, prefix=prefix)
        crds = _crds(api, [str(c["name"]) for c in manifest.crds])
    except (snapshotplan.SnapshotError, crdview.CRDError, kubeio.ApiError) as exc:
        out.step(f"FAILED: {exc}")
        return 1
    out.step(f"snapshot {namespace}/{prefix}: {len(objects)} objects, taken {manifest.taken_at}")
    counts: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    for saved in objects:
        try:
            action = restore_one(api, saved, crds)
        except (kubeio.ApiError, KeyError) as exc:
            failures.append(f"{saved.get('kind')} {crdview.object_key(saved)}: {exc}")
            continue
        counts[action.value] += 1
    out.step("restored: " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())))
    if failures:
        out.step(f"FAILED: {len(failures)} objects not restored:")
        for failure in failures:
            out.step(f"  {failure}")
        out.step("  fix: correct the cause above and rerun restore (it is idempotent)")
        return 1
    return 0


def restore_one(
    api: kubeio.Api, saved: Mapping[str, Any], crds: Mapping[str, crdview.CRDView]
) -> restoreplan.Action:
    """Restore one saved object; what was done."""
    group, _, version = str(saved["apiVersion"]).partition("/")
    crd = crds[f"{group}/{saved['kind']}"]
    resource = resources.Resource(group, version, crd.plural, crd.namespaced)
    meta = saved["metadata"]
    ns = meta.get("namespace") or ""
    path = resource.path(meta["name"], namespace=ns)
    plan = restoreplan.step(saved, api.get_or_none(path), status_subresource=crd.status_subresource)
    written: dict[str, Any] | None = None
    if plan.action is restoreplan.Action.CREATE:
        assert plan.body is not None
        written = api.create(resource.path(namespace=ns), plan.body)
    elif plan.action is restoreplan.Action.UPDATE:
        assert plan.body is not None
        written = api.replace(path, plan.body)
    if plan.status is not None:
        current = written or api.get(path)
        api.replace(
            resource.path(meta["name"], namespace=ns, subresource="status"),
            {**current, "status": plan.status},
        )
        if plan.action is restoreplan.Action.UNCHANGED:
            return restoreplan.Action.UPDATE
    return plan.action
