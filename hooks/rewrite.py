"""Rewrite every object of a CRD at its storage version.

With the built-in StorageVersionMigration where the cluster runs it, else by paged unchanged
writes with a resumable checkpoint.

An unchanged PUT makes the API server encode the object at the storage version; when the
stored bytes are those already, the API server skips the etcd write, so a rerun costs a
round trip per object and nothing else. Decisions live in :mod:`.rewriteplan`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import time
from collections.abc import Callable
from typing import Any

from computedomains import waiting
from computedomains.api import resources
from computedomains.hooks import crdview, kubeio, report, rewriteplan

CONFLICT_RETRIES = 5
"""Re-reads of an object whose write conflicted before it counts as failed (each conflict is
another writer's write, which stored it at the storage version anyway)."""


class Written(enum.Enum):
    """What writing one object back did."""

    WRITTEN = "written"
    GONE = "gone"
    """Deleted meanwhile: nothing to migrate."""


@dataclasses.dataclass
class Outcome:
    """The rewrite of one CRD."""

    written: int = 0
    gone: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    """``namespace/name: why`` of every object that could not be written back."""
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Every object is stored at the storage version (``storedVersions`` may be pruned)."""
        return not self.failures


class CheckpointStore:
    """The checkpoint ConfigMap ``<prefix>-checkpoint`` in the release namespace."""

    def __init__(self, api: kubeio.Api, *, namespace: str, prefix: str) -> None:
        self._api = api
        self._namespace = namespace
        self.name = f"{prefix}-checkpoint"

    def load(self) -> rewriteplan.Checkpoint | None:
        """The stored checkpoint, if any."""
        found = self._api.get_or_none(
            resources.CONFIG_MAPS.path(self.name, namespace=self._namespace)
        )
        return rewriteplan.Checkpoint.from_data((found or {}).get("data"))

    def save(self, checkpoint: rewriteplan.Checkpoint) -> None:
        """Write the checkpoint (one writer: the hook; an unconditional PUT)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self._namespace,
                "labels": {rewriteplan.CHECKPOINT_LABEL: "true"},
            },
            "data": checkpoint.to_data(),
        }
        try:
            self._api.replace(
                resources.CONFIG_MAPS.path(self.name, namespace=self._namespace), body
            )
        except kubeio.NotFound:
            self._api.create(resources.CONFIG_MAPS.path(namespace=self._namespace), body)


def write_back(api: kubeio.Api, resource: resources.Resource, obj: dict[str, Any]) -> Written:
    """PUT ``obj`` back unchanged; on a conflict re-read and write again."""
    meta = obj["metadata"]
    path = resource.path(meta["name"], namespace=meta.get("namespace") or "")
    current: dict[str, Any] | None = obj
    for _ in range(CONFLICT_RETRIES):
        assert current is not None
        try:
            api.replace(path, current)
            return Written.WRITTEN
        except kubeio.NotFound:
            return Written.GONE
        except kubeio.Conflict:
            current = api.get_or_none(path)
            if current is None:
                return Written.GONE
    raise RuntimeError(f"still conflicting after {CONFLICT_RETRIES} re-reads")


@dataclasses.dataclass(frozen=True)
class Paging:
    """How the paged rewrite runs."""

    page_size: int
    workers: int
    expected: int
    """Objects the snapshot counted, for progress lines (0: unknown)."""


# size: one resumable loop; listing ahead, writing and the checkpoint read best together
def rewrite_paged(
    api: kubeio.Api,
    crd: crdview.CRDView,
    *,
    migration: str,
    store: CheckpointStore,
    paging: Paging,
    out: report.Report,
) -> Outcome:
    """Write every object of ``crd`` back, page by page, resuming from the checkpoint."""
    began = time.monotonic()
    checkpoint = store.load()
    begin = rewriteplan.start(checkpoint, migration=migration, resource=crd.name)
    if checkpoint is None or checkpoint.migration != migration:
        checkpoint = rewriteplan.Checkpoint(migration=migration)
    outcome = Outcome()
    if begin.skip:
        out.step(f"rewrite: {crd.name}: already done (checkpoint {store.name})")
        return outcome
    if begin.resumed:
        out.step(
            f"rewrite: {crd.name}: resuming after {begin.after} ({begin.count} objects "
            f"written by an earlier run, checkpoint {store.name})"
        )
    token, after, count = begin.continue_token, begin.after, begin.count

    def list_from(continue_token: str) -> kubeio.Page:
        return api.list_page(
            crd.resource.path(), limit=paging.page_size, continue_token=continue_token
        )

    # The next page is listed while this one is written: the API server does both at once.
    with (
        concurrent.futures.ThreadPoolExecutor(max_workers=paging.workers) as pool,
        concurrent.futures.ThreadPoolExecutor(max_workers=1) as lister,
    ):
        listing = lister.submit(list_from, token)
        while True:
            try:
                page = listing.result()
            except kubeio.Gone:
                out.step(
                    f"rewrite: {crd.name}: continue token expired; listing from the start, "
                    f"skipping up to {after}"
                )
                token = ""
                listing = lister.submit(list_from, token)
                continue
            if page.continue_token:
                listing = lister.submit(list_from, page.continue_token)
            keys = [crdview.object_key(o) for o in page.items]
            # Without a token the list starts over: skip what an earlier page completed.
            todo = rewriteplan.remaining(keys, "" if token else after)
            _write_page(pool, api, crd, [page.items[i] for i in todo], outcome)
            count += len(todo)
            after = keys[-1] if keys else after
            if not outcome.failures:
                # Once an object failed, the resume point stays before it: a run killed later
                # must write it again, or it would find no failure and prune storedVersions.
                checkpoint = rewriteplan.after_page(
                    checkpoint,
                    resource=crd.name,
                    continue_token=page.continue_token,
                    last=after,
                    written=len(todo),
                )
                store.save(checkpoint)
            _progress(
                out, crd, count=count, this_run=count - begin.count, paging=paging, began=began
            )
            if not page.continue_token:
                break
            token = page.continue_token
    outcome.seconds = time.monotonic() - began
    # A failed object must be retried by a rerun: only a clean pass marks the CRD done.
    store.save(
        rewriteplan.finished(checkpoint, resource=crd.name)
        if outcome.complete
        else rewriteplan.Checkpoint(migration=migration, done=checkpoint.done)
    )
    return outcome


def _write_page(
    pool: concurrent.futures.ThreadPoolExecutor,
    api: kubeio.Api,
    crd: crdview.CRDView,
    items: list[dict[str, Any]],
    outcome: Outcome,
) -> None:
    futures = {pool.submit(write_back, api, crd.resource, obj): obj for obj in items}
    for future in concurrent.futures.as_completed(futures):
        key = crdview.object_key(futures[future])
        try:
            result = future.result()
        except (kubeio.ApiError, RuntimeError) as exc:
            outcome.failures.append(f"{key}: {exc}")
            continue
        if result is Written.WRITTEN:
            outcome.written += 1
        else:
            outcome.gone += 1


def _progress(
    out: report.Report,
    crd: crdview.CRDView,
    *,
    count: int,
    this_run: int,
    paging: Paging,
    began: float,
) -> None:
    elapsed = max(time.monotonic() - began, 1e-6)
    total = f"/{paging.expected}" if paging.expected else ""
    out.step(
        f"rewrite: {crd.name}: {count}{total} written at {crd.storage_version} "
        f"({this_run / elapsed:.0f}/s)"
    )


# -- StorageVersionMigration ------------------------------------------------------------


def svm_version(api: kubeio.Api) -> str | None:
    """The StorageVersionMigration version the cluster serves, if any."""
    return rewriteplan.pick_svm_version(api.served_versions(rewriteplan.SVM_GROUP))


# size: one StorageVersionMigration's life, from the request to its last condition
def rewrite_with_svm(
    api: kubeio.Api,
    crd: crdview.CRDView,
    *,
    migration: str,
    api_version: str,
    timeout: float,
    start_timeout: float,
    out: report.Report,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome | None:
    """One StorageVersionMigration for ``crd``, awaited.

    None when nothing picked it up within ``start_timeout`` (the API is served but no
    controller runs it).
    """
    began = clock()
    svms = resources.Resource(rewriteplan.SVM_GROUP, api_version, rewriteplan.SVM_PLURAL, False)
    name = rewriteplan.svm_name(migration, crd.plural, crd.group)
    existing = api.get_or_none(svms.path(name))
    if existing is not None and rewriteplan.svm_phase(existing)[0] is rewriteplan.Phase.FAILED:
        out.step(f"rewrite: {crd.name}: StorageVersionMigration {name} failed before; again")
        api.delete(svms.path(name))
        waiting.until(
            f"StorageVersionMigration {name} deleted",
            lambda: api.get_or_none(svms.path(name)) is None,
            timeout=60,
            interval=0.5,
        )
        existing = None
    if existing is None:
        api.create(
            svms.path(),
            rewriteplan.svm_body(
                name=name,
                api_version=api_version,
                group=crd.group,
                plural=crd.plural,
                storage_version=crd.storage_version,
            ),
        )
        out.step(f"rewrite: {crd.name}: created StorageVersionMigration {name}")
    seen: list[rewriteplan.Phase] = []

    def settled() -> tuple[rewriteplan.Phase, str] | None:
        phase, why = rewriteplan.svm_phase(api.get(svms.path(name)))
        if not seen or seen[-1] is not phase:
            seen.append(phase)
            out.step(f"rewrite: {crd.name}: StorageVersionMigration {name}: {phase.value}")
        if phase is rewriteplan.Phase.PENDING and clock() - began > start_timeout:
            return phase, why
        return (
            (phase, why)
            if phase in (rewriteplan.Phase.SUCCEEDED, rewriteplan.Phase.FAILED)
            else None
        )

    phase, why = waiting.until(
        f"StorageVersionMigration {name} to finish", settled, timeout=timeout, interval=1.0
    )
    if phase is rewriteplan.Phase.PENDING:
        api.delete(svms.path(name))
        return None
    outcome = Outcome(seconds=clock() - began)
    if phase is rewriteplan.Phase.FAILED:
        outcome.failures.append(f"StorageVersionMigration {name}: {why}")
    else:
        api.delete(svms.path(name))
    return outcome
