"""The paged rewrite's resume point never passes an object that failed.

A Job killed after a page with a failure must, when run again, write that object again:
otherwise the rerun sees no failure and the migration prunes ``storedVersions`` while the
object is still stored at the old version.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from computedomains.hooks import crdview, kubeio, report, rewrite, rewriteplan
from computedomains.kube import client as kube_client

PAGE = 2
NAMES = [f"cd-{i}" for i in range(6)]  # three pages


class Killed(Exception):
    """The hook's process is gone (a Job killed mid-run)."""


@dataclasses.dataclass
class _Api:
    """Lists a CRD's objects by page, refuses to write the ``bad`` ones, dies on ``kill_at``."""

    bad: set[str]
    kill_at: str = ""
    """The continue token whose page the process does not live to list."""
    written: list[str] = dataclasses.field(default_factory=list)
    configmap: dict[str, Any] | None = None

    def list_page(self, path: str, *, limit: int, continue_token: str = "") -> kubeio.Page:
        if continue_token and continue_token == self.kill_at:
            raise Killed
        start = int(continue_token or 0)
        items = [{"metadata": {"name": n, "namespace": "ns"}} for n in NAMES[start : start + limit]]
        after = start + limit
        return kubeio.Page(items, str(after) if after < len(NAMES) else "", "1")

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("-checkpoint"):
            if self.configmap is None:
                raise kubeio.failure("PUT", path, kube_client.ApiError(404, "NotFound", ""))
            self.configmap = body
            return body
        name = body["metadata"]["name"]
        if name in self.bad:
            refused = kube_client.ApiError(422, "Invalid", f"{name}: spec.numNodes: too many")
            raise kubeio.failure("PUT", path, refused)
        self.written.append(name)
        return body

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.configmap = body
        return body

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.configmap


CRD = crdview.CRDView(
    name="computedomains.example.com", uid="u", resource_version="1", kind="ComputeDomain",
    group="example.com", plural="computedomains", namespaced=True, storage_version="v2",
    served_versions=("v1", "v2"), stored_versions=("v1", "v2"), schema={},
    status_subresource=True,
)  # fmt: skip


def _run(api: _Api) -> rewrite.Outcome:
    store = rewrite.CheckpointStore(api, namespace="ns", prefix="mig")
    paging = rewrite.Paging(page_size=PAGE, workers=1, expected=len(NAMES))
    return rewrite.rewrite_paged(
        api,
        CRD,
        migration="m1",
        store=store,
        paging=paging,
        out=report.Report("test"),
    )


def test_a_run_killed_after_a_failed_page_writes_the_failed_object_again() -> None:
    api = _Api(bad={"cd-1"}, kill_at="4")
    with pytest.raises(Killed):
        _run(api)  # page 1 fails cd-1, page 2 is written, then the process dies
    saved = rewriteplan.Checkpoint.from_data((api.configmap or {}).get("data"))
    assert saved is None or saved.last < "ns/cd-1", saved  # resumes before the failed object
    api.kill_at, api.written = "", []
    again = _run(api)  # the object is still bad: the rerun must say so, not skip it
    assert again.failures and "cd-1" in again.failures[0]
    assert not again.complete
    api.bad.clear()
    done = _run(api)
    assert done.complete and "cd-1" in api.written
