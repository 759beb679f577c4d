"""``computedomains hooks migrate``: snapshot, validate, rewrite, prune, adopt.

Snapshot every object, validate it against the storage schema, rewrite it at the storage
version, prune ``storedVersions``, and (``--adopt``) retire an incumbent install's per-domain
objects.

Post-install and post-upgrade hook (docs/migration.md). Every step is idempotent; a rerun of an
interrupted migration reuses its snapshot and resumes the rewrite from the checkpoint.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping, Sequence

from computedomains import flags, waiting
from computedomains.api import crds as api_crds
from computedomains.api import resources
from computedomains.hooks import (
    adopt,
    client,
    crdview,
    kubeio,
    report,
    rewrite,
    schemas,
    snapshotplan,
)
from computedomains.hooks import snapshot as snapshots

DEFAULT_PREFIX = "compute-domains-snapshot"
METHODS = ("auto", "storage-version-migration", "rewrite")
SVM_START_TIMEOUT = 60.0
"""Seconds a StorageVersionMigration may stay untouched before ``auto`` concludes no
controller runs it and rewrites page by page instead."""


SNAPSHOT_PREFIX = flags.Flag(
    "--snapshot-prefix", "name prefix of the snapshot ConfigMaps in --namespace", DEFAULT_PREFIX
)
"""Migrate's default; restore takes the same flag, required (it names a snapshot taken)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.Connection):
    """The hook's settings: each field declares its flag once (docs/migration.md lists them).

    ``namespace``: the release's, where the snapshot and checkpoint ConfigMaps and our IMEX
    agent pods are.
    """

    prefix: str = flags.field(SNAPSHOT_PREFIX)
    """Snapshot ConfigMaps ``<prefix>-<n>``/``-manifest``, checkpoint ``<prefix>-checkpoint``."""
    page_size: int = flags.option(
        "--page-size", default="500", type=flags.at_least_one, help="objects per list page"
    )
    workers: int = flags.option(
        "--workers", default="8", type=flags.at_least_one, help="concurrent writes"
    )
    method: str = flags.option(
        "--method",
        default="auto",
        choices=METHODS,
        help="auto: StorageVersionMigration when served, else paged rewrites",
    )
    timeout: float = flags.seconds(
        "--svm-timeout", default="600", help="seconds to wait for each StorageVersionMigration"
    )
    invalid: str = flags.option(
        "--invalid",
        default="fail",
        choices=("fail", "warn"),
        help="objects invalid against the storage schema: fail the hook (after every "
        "other step) or only report them",
    )
    crds: tuple[str, ...] = flags.option(
        "--crds",
        default=",".join(r.name for r in api_crds.RESOURCES),
        type=flags.names,
        help="comma-separated CRDs whose objects to migrate",
    )
    readable_timeout: float = flags.seconds(
        "--readable-timeout",
        default="300",
        help="seconds to wait until every object reads at the storage version (the conversion "
        "webhook may still be starting: applied as plain objects, everything starts at once)",
    )
    """Seconds to wait until the objects read at the storage version."""
    adoption: adopt.Settings = flags.group(adopt.Settings)

    @property
    def fail_on_invalid(self) -> bool:
        """Objects invalid against the storage schema fail the hook."""
        return self.invalid == "fail"

    @property
    def adopt(self) -> adopt.Settings | None:
        """The adoption asked for (``--adopt``), None when not."""
        return self.adoption if self.adoption.enabled else None


STOP = report.Stop(
    (kubeio.ApiError, snapshotplan.SnapshotError, waiting.WaitTimeout),
    "migration stopped",
    "correct the cause (the conversion webhook must be up to read old objects) and rerun: "
    "the snapshot is reused and the rewrite resumes",
)


def read_crds(api: kubeio.Api, names: Sequence[str]) -> list[crdview.CRDView]:
    """The live CRDs ``names``; :class:`crdview.CRDError` naming a missing one."""
    views = []
    for name in names:
        crd = api.get_or_none(resources.CRDS.path(name))
        if crd is None:
            raise crdview.CRDError(f"CRD {name} not found: install the chart's CRDs first")
        views.append(crdview.view(crd))
    return views


def run(api: kubeio.Api, settings: Settings, out: report.Report) -> int:
    """Every step in order; 0 when all succeeded (the exit code Helm and Argo CD see)."""
    began = time.monotonic()
    try:
        crds = read_crds(api, settings.crds)
    except (crdview.CRDError, kubeio.ApiError) as exc:
        out.step(f"FAILED: {exc}")
        return 1
    for crd in crds:
        out.step(
            f"{crd.name}: storage version {crd.storage_version}, stored versions "
            f"{','.join(crd.stored_versions) or '-'}"
        )
        wait_readable(api, crd, timeout=settings.readable_timeout, out=out)
    taken = snapshots.take(
        api,
        crds,
        namespace=settings.namespace,
        prefix=settings.prefix,
        page_size=settings.page_size,
        out=out,
        now=datetime.datetime.now(datetime.UTC),
    )
    problems = validate(api, crds, taken, settings=settings, out=out)
    failures = rewrite_all(api, crds, settings=settings, expected=taken.manifest.counts, out=out)
    adopted = True
    if settings.adopt is not None:
        adopted = adopt.adopt(api, settings.adopt, namespace=settings.namespace, out=out)
    out.step(f"finished in {time.monotonic() - began:.1f}s")
    return _verdict(out, problems, failures, adopted=adopted, settings=settings)


def wait_readable(
    api: kubeio.Api, crd: crdview.CRDView, *, timeout: float, out: report.Report
) -> None:
    """Until the CRD's objects list at its storage version (conversion works), bounded."""
    said: list[str] = []

    def readable() -> bool:
        try:  # every page: each object stored at another version must convert
            for _ in api.list_all(crd.resource.path()):
                pass
        except kubeio.ApiError as exc:
            if not said:
                out.step(f"waiting up to {timeout:g}s to read {crd.name} at "
                         f"{crd.storage_version}: {exc}")  # fmt: skip
                said.append(str(exc))
            raise
        return True

    waiting.until(
        f"{crd.name} to read at {crd.storage_version} (the conversion webhook serving)",
        readable, timeout=timeout, interval=2.0, retry_on=(kubeio.ApiError,),
    )  # fmt: skip


def validate(
    api: kubeio.Api,
    crds: Sequence[crdview.CRDView],
    taken: snapshots.Taken,
    *,
    settings: Settings,
    out: report.Report,
) -> list[schemas.Problem]:
    """Every stored object checked against its CRD's storage schema; the problems found."""
    problems: list[schemas.Problem] = []
    for crd in crds:
        validator = schemas.Validator(crd.kind, crd.schema)
        objects = (taken.objects or {}).get(crd.name)
        if objects is None:
            objects = snapshots.list_objects(api, crd, page_size=settings.page_size)
        found = [p for obj in objects for p in validator.problems(obj)]
        invalid = len({(p.namespace, p.name) for p in found})
        out.step(
            f"validate: {crd.name}: {len(objects)} objects against the "
            f"{crd.storage_version} schema, {invalid} invalid"
        )
        for problem in found:
            out.step(problem.line())
        problems.extend(found)
    return problems


def rewrite_all(
    api: kubeio.Api,
    crds: Sequence[crdview.CRDView],
    *,
    settings: Settings,
    expected: Mapping[str, int],
    out: report.Report,
) -> list[str]:
    """Rewrite and prune every CRD that needs it; the failures (objects, prunes) found."""
    migration = crdview.migration_id(crds)
    store = rewrite.CheckpointStore(api, namespace=settings.namespace, prefix=settings.prefix)
    svm = rewrite.svm_version(api) if settings.method != "rewrite" else None
    if settings.method == "storage-version-migration" and svm is None:
        return [
            "--method=storage-version-migration: the cluster does not serve "
            "storagemigration.k8s.io; use --method=rewrite"
        ]
    failures: list[str] = []
    for crd in crds:
        if not crd.needs_rewrite:
            out.step(
                f"rewrite: {crd.name}: every object is stored at {crd.storage_version}; "
                "nothing to do"
            )
            continue
        outcome = None
        if svm is not None:
            outcome = rewrite.rewrite_with_svm(
                api,
                crd,
                migration=migration,
                api_version=svm,
                timeout=settings.timeout,
                start_timeout=SVM_START_TIMEOUT,
                out=out,
            )
            if outcome is None:
                out.step(
                    f"rewrite: {crd.name}: no controller ran the StorageVersionMigration in "
                    f"{SVM_START_TIMEOUT:.0f}s; rewriting page by page instead"
                )
        if outcome is None:
            paging = rewrite.Paging(
                page_size=settings.page_size,
                workers=settings.workers,
                expected=int(expected.get(crd.name, 0)),
            )
            outcome = rewrite.rewrite_paged(
                api, crd, migration=migration, store=store, paging=paging, out=out
            )
        out.step(
            f"rewrite: {crd.name}: {outcome.written} written, {outcome.gone} deleted "
            f"meanwhile, {len(outcome.failures)} failed in {outcome.seconds:.1f}s"
        )
        failures.extend(f"{crd.name} {f}" for f in outcome.failures)
        if outcome.complete:
            failures.extend(prune(api, crd, out=out))
        else:
            out.step(f"rewrite: {crd.name}: storedVersions left as they are (objects failed)")
    return failures


def prune(api: kubeio.Api, crd: crdview.CRDView, *, out: report.Report) -> list[str]:
    """Cut ``storedVersions`` to the storage version, unless the CRD changed meanwhile."""
    live = api.get(resources.CRDS.path(crd.name))
    now = crdview.view(live)
    if now.storage_version != crd.storage_version:
        return [
            f"{crd.name}: storage version changed to {now.storage_version} during the "
            "migration; run the hook again"
        ]
    try:
        api.replace(
            resources.CRDS.path(crd.name, subresource="status"), crdview.pruned_status(live)
        )
    except kubeio.Conflict:
        return [f"{crd.name}: the CRD changed while pruning storedVersions; run the hook again"]
    out.step(
        f"prune: {crd.name}: storedVersions {','.join(now.stored_versions)} -> "
        f"{crd.storage_version}"
    )
    return []


def _verdict(
    out: report.Report,
    problems: list[schemas.Problem],
    failures: list[str],
    *,
    adopted: bool,
    settings: Settings,
) -> int:
    code = 0
    if failures:
        out.step(f"FAILED: {len(failures)} writes did not go through:")
        for failure in failures:
            out.step(f"  {failure}")
        out.step(
            "  fix: correct the cause above (webhook down? RBAC?) and rerun: the "
            "migration resumes from its checkpoint"
        )
        code = 1
    if problems:
        names = sorted({f"{p.kind} {p.namespace}/{p.name}" for p in problems})
        severity = "FAILED" if settings.fail_on_invalid else "WARNING"
        out.step(
            f"{severity}: {len(names)} objects do not match the storage schema (listed "
            f"above as INVALID); they were kept as they are"
        )
        out.step(
            "  fix: edit each listed field (kubectl edit), then rerun the hook; or "
            "--invalid=warn to accept them"
        )
        code = code or (1 if settings.fail_on_invalid else 0)
    if not adopted:
        code = 1
    return code
