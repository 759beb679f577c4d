"""``-v 1`` shows each decision's inputs: one DEBUG line per controller decision, none at INFO."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import pytest

from computedomains import logs
from computedomains.controller import decide, decisionlines
from computedomains.controller.binder import Binder
from computedomains.controller.caches import Caches
from computedomains.kube import client, events, resourceclaims
from tests.support import snapshots
from tests.support.channelclaims import channel_claim
from tests.support.fakeapi import FakeApi


class _Events:
    def emit(
        self, ref: events.ObjectRef, *, reason: str, message: str, warning: bool = False
    ) -> None:
        pass


class _Api(FakeApi):
    """Takes the encoded status updates the binder sends."""

    def replace(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        decoded = json.loads(body) if isinstance(body, bytes) else body
        return super().replace(path, decoded, **kwargs)


def _domain(uid: str, name: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name, "namespace": "ns", "resourceVersion": "1"}}


def _binder_with_two_domains_on_a_free_node() -> Binder:
    """``first`` and ``second`` each have a claim waiting on the free node n1, first's first."""
    api = _Api()
    caches = Caches(cast(client.Client, api), namespace="drv", on_key=lambda _: None,
                    on_relist=lambda: None)  # fmt: skip
    for uid, name in (("first", "cd-a"), ("second", "cd-b")):
        caches.domains._put(uid, _domain(uid, name))
    for uid, domain, at in (("c1", "first", "t1"), ("c2", "second", "t2")):
        claim = channel_claim(uid, domain, node="n1", at=f"2026-01-01T00:00:0{at[1]}Z")
        caches.claims._put(uid, claim)
        api.objects[resourceclaims.path("ns", f"claim-{uid}")] = {
            **claim, "metadata": {**claim["metadata"], "resourceVersion": "1"},
        }  # fmt: skip
    return Binder(cast(client.Client, api), caches, recorder=_Events())


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_the_free_node_decision_names_its_inputs_and_outcome_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger=logs.OURS):
        _binder_with_two_domains_on_a_free_node().bind("n1")
    [record] = _lines(caplog, "free-node answers")
    assert (record.levelno, record.name) == (logging.DEBUG, f"{logs.OURS}.controller.binder")
    line = record.getMessage()
    assert line.startswith("node n1: free-node answers from record -, holder -, ")
    assert "2 allocation(s), 0 foreign" in line
    assert "claim ns/claim-c1 of first granted (NodeReserved)" in line
    assert "claim ns/claim-c2 of second refused (NodeInAnotherComputeDomain)" in line

    caplog.clear()
    with caplog.at_level(logging.INFO, logger=logs.OURS):
        _binder_with_two_domains_on_a_free_node().bind("n1")
    assert _lines(caplog, "free-node answers") == []
    assert len(_lines(caplog, "on node n1: ")) == 2  # the answers themselves, at INFO


def test_the_membership_and_status_lines_name_members_slots_and_outcome() -> None:
    snap = snapshots.snapshot(
        nodes=[snapshots.node("n1"), snapshots.node("n2"), snapshots.node("n3", clique="")],
        agents=[snapshots.agent("n1")],
        cliques={snapshots.C1: (snapshots.daemon("n1", 0, ready=True),)},
    )
    plan = decide.plan(snap, limit=18, reported=frozenset())
    assert plan.cliques_plan is not None and plan.desired is not None
    members = decisionlines.membership_plan(snap, plan.cliques_plan, limit=18, writes=plan.cliques)
    assert members == (
        f"domain ns/cd ({snapshots.UID}): membership from 3 member(s), 1 stored slot(s), "
        f"limit 18: 2 slot(s) in 1 clique(s), no fabric n3; {snapshots.C1}: assigned n2=1, "
        f"freed -, overflow -; clique writes {snapshots.C1}"
    )
    shown = decisionlines.status_decision(
        snap, plan.desired, written=plan.status is not None, released=plan.remove_finalizer
    )
    assert shown.startswith(f"domain ns/cd ({snapshots.UID}): status NotReady 2/3, Ready=False (")
    assert shown.endswith("from 3 member(s) (2 ready), numNodes 0, stored none: written")
