"""Adoption plan: incumbent per-domain objects retire only once our agent serves the nodes."""

from __future__ import annotations

import datetime
from typing import Any

from computedomains.api import constants, domainview, imex
from computedomains.hooks import adoptplan

STARTED = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def node(name: str, uid: str = "") -> dict[str, Any]:
    labels = {constants.COMPUTE_DOMAIN_LABEL: uid} if uid else {}
    return {"metadata": {"name": name, "labels": labels}}


def domain(uid: str, name: str, status_nodes: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "team"},
        "status": {"status": "Ready", "nodes": [{"name": n} for n in status_nodes]},
    }


def agent_pod(
    node_name: str, uid: str, *, ready: bool = True, reported_at: datetime.datetime = STARTED
) -> dict[str, Any]:
    start = imex.AgentStart("pod-uid", "abc", reported_at)
    return {
        "metadata": {
            "annotations": {imex.DOMAIN_ANNOTATION: uid, imex.START_ANNOTATION: start.annotation()}
        },
        "spec": {"nodeName": node_name},
        "status": {
            "conditions": [
                {
                    "type": constants.IMEX_READY_CONDITION,
                    "status": "True" if ready else "False",
                    "reason": "Ready",
                }
            ],
            "containerStatuses": [
                {
                    "name": imex.AGENT_CONTAINER,
                    "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}},
                }
            ],
        },
    }


def _adoptee(uid: str, name: str, nodes: frozenset[str]) -> adoptplan.Adoptee:
    identity = domainview.Domain(uid=domainview.DomainUID(uid), name=name, namespace="team",
                                 template=f"{name}-channel")  # fmt: skip
    return adoptplan.Adoptee(identity, nodes)


def incumbent(uid: str) -> list[adoptplan.Incumbent]:
    name = f"computedomain-daemon-{uid}"
    return [
        adoptplan.Incumbent("DaemonSet", name, uid),
        adoptplan.Incumbent("ResourceClaimTemplate", name, uid),
    ]


def test_domain_nodes_are_labelled_or_listed_nodes_that_exist() -> None:
    found = adoptplan.domains(
        [domain("u1", "a", status_nodes=("n2", "gone"))],
        [node("n1", "u1"), node("n2"), node("n3", "u2")],
    )
    assert [(d.uid, d.key, d.nodes) for d in found] == [("u1", "team/a", frozenset({"n1", "n2"}))]


def test_incumbents_are_the_objects_with_a_domain_label() -> None:
    objs = [
        {"metadata": {"name": "d1", "labels": {constants.COMPUTE_DOMAIN_LABEL: "u1"}}},
        {"metadata": {"name": "other", "labels": {}}},
    ]
    assert adoptplan.incumbents("DaemonSet", objs) == [adoptplan.Incumbent("DaemonSet", "d1", "u1")]


def test_served_needs_ready_for_the_domain_by_the_running_agent() -> None:
    pods = [
        agent_pod("n1", "u1"),
        agent_pod("n2", "u1", ready=False),
        # A report from an earlier run of the agent (before the container's start) is stale.
        agent_pod("n3", "u1", reported_at=STARTED - datetime.timedelta(minutes=5)),
        {
            **agent_pod("n4", "u1"),
            "metadata": {**agent_pod("n4", "u1")["metadata"], "deletionTimestamp": "x"},
        },
    ]
    assert adoptplan.served(pods) == {"n1": "u1"}


def test_retire_only_when_every_node_is_served() -> None:
    domains = [
        _adoptee("u1", "a", frozenset({"n1", "n2"})),
        _adoptee("u2", "b", frozenset({"n3"})),
    ]
    objects = incumbent("u1") + incumbent("u2")
    plan = adoptplan.plan(domains, objects, {"n1": "u1", "n3": "u2"})
    assert plan.retire == tuple(incumbent("u2"))
    assert plan.waiting == {"team/a": ("n2",)}
    assert plan.adopted == ("team/b",)
    assert not plan.done
    done = adoptplan.plan(domains, objects, {"n1": "u1", "n2": "u1", "n3": "u2"})
    assert done.done and len(done.retire) == 4


def test_a_node_serving_another_domain_does_not_count() -> None:
    domains = [_adoptee("u1", "a", frozenset({"n1"}))]
    plan = adoptplan.plan(domains, incumbent("u1"), {"n1": "u9"})
    assert plan.retire == () and plan.waiting == {"team/a": ("n1",)}


def test_a_domain_without_nodes_hands_over_at_once() -> None:
    plan = adoptplan.plan([_adoptee("u1", "a", frozenset())], incumbent("u1"), {})
    assert plan.done and plan.retire == tuple(incumbent("u1"))


def test_leftovers_of_deleted_domains_are_retired() -> None:
    plan = adoptplan.plan([], incumbent("dead"), {})
    assert plan.done and plan.retire == tuple(incumbent("dead")) and plan.adopted == ()


def test_domains_without_incumbent_objects_count_as_adopted() -> None:
    plan = adoptplan.plan([_adoptee("u1", "a", frozenset({"n1"}))], [], {})
    assert plan.done and plan.adopted == ("team/a",) and plan.retire == ()
