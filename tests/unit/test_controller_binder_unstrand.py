"""A pod stranded on a node another domain took: recreated through its owner, or told why."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest

from computedomains.api import placement as contract
from computedomains.api import resources
from computedomains.controller.binder import Binder
from computedomains.controller.caches import Caches
from computedomains.kube import client, events, writes
from tests.support.fakeapi import FakeApi

POD_PATH = resources.PODS.path("worker", namespace="ns")
STRANDED = contract.ChannelAllocation(
    uid="claim-uid", namespace="ns", name="worker-ch", domain_uid="late", node="n1",
    devices=("channel-0",), allocated_at="2026-12-04T10:00:00Z", pending=False, granted=False,
    refused=False, pods=(("worker", "pod-uid"),),
)  # fmt: skip


@dataclasses.dataclass
class _Events:
    seen: list[tuple[str, str, str, bool]] = dataclasses.field(default_factory=list)

    def emit(
        self, ref: events.ObjectRef, *, reason: str, message: str, warning: bool = False
    ) -> None:
        self.seen.append((ref.name, reason, message, warning))


def _pod(*, phase: str = "Pending", owned: bool = True, uid: str = "pod-uid") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "worker", "namespace": "ns", "uid": uid,
                            "resourceVersion": "1"}  # fmt: skip
    if owned:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "train-7d9", "controller": True}]
    return {"metadata": meta, "status": {"phase": phase}}


def _binder(api: FakeApi, recorder: _Events, *, leading: bool = True) -> Binder:
    caches = Caches(cast(client.Client, api), namespace="drv", on_key=lambda _: None,
                    on_relist=lambda: None)  # fmt: skip
    return Binder(cast(client.Client, api), caches, recorder=recorder, may_write=lambda: leading)


def _unstrand(binder: Binder) -> None:
    binder._unstrand(STRANDED, STRANDED.pods[0], holder="domain early")


def test_an_owned_pending_pod_is_deleted_so_its_owner_places_it_again() -> None:
    api, recorder = FakeApi(objects={POD_PATH: _pod()}), _Events()
    _unstrand(_binder(api, recorder))
    assert POD_PATH not in api.objects
    [(name, reason, message, warning)] = recorder.seen
    assert (name, reason, warning) == ("worker", "NodeInAnotherComputeDomain", True)
    assert "node n1 went to domain early" in message and "ReplicaSet train-7d9" in message


def test_a_bare_pod_is_kept_and_told_why_it_waits() -> None:
    api, recorder = FakeApi(objects={POD_PATH: _pod(owned=False)}), _Events()
    _unstrand(_binder(api, recorder))
    assert POD_PATH in api.objects and api.writes() == []
    [(_, _, message, _)] = recorder.seen
    assert "waits until that domain leaves the node" in message


@pytest.mark.parametrize(
    "objects",
    [
        {POD_PATH: _pod(phase="Running")},  # prepared after all: the node is its domain's
        {POD_PATH: _pod(uid="a-newer-pod")},  # already replaced
        {},  # gone
    ],
)
def test_a_pod_that_runs_was_replaced_or_is_gone_is_left_alone(objects: dict[str, Any]) -> None:
    api, recorder = FakeApi(objects=dict(objects)), _Events()
    _unstrand(_binder(api, recorder))
    assert api.writes() == [] and recorder.seen == []


def test_a_replica_that_lost_the_lease_deletes_nothing() -> None:
    api, recorder = FakeApi(objects={POD_PATH: _pod()}), _Events()
    with pytest.raises(writes.Fenced):
        _unstrand(_binder(api, recorder, leading=False))
    assert POD_PATH in api.objects and recorder.seen == []
