"""The act step: fenced writes, planned writes that never outlive their snapshot, template
refusals reported. Against the in-memory API (``FakeApi``), with the controller's real caches
listed from it."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import prometheus_client
import pytest

from computedomains.api import constants, resources
from computedomains.api.domainview import Domain
from computedomains.controller import labelcopies, metrics, objects
from computedomains.controller.caches import Caches
from computedomains.controller.frozencliques import Frozen
from computedomains.controller.reconciler import STATUS_INTERVAL, Reconciler
from computedomains.kube import client, events, writes
from tests.support.channelclaims import channel_claim
from tests.support.fakeapi import FakeApi
from tests.support.snapshots import C1, NOW, UID

DRIVER_NS = "drv"
DOMAIN_PATH = resources.COMPUTE_DOMAINS.path("cd", namespace="ns")
TEMPLATES = resources.RESOURCE_CLAIM_TEMPLATES.path(namespace="ns")
EVENTS = "/api/v1/namespaces/ns/events"


def domain_object(*, finalized: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION_V1BETA2,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "cd", "namespace": "ns", "uid": UID, "resourceVersion": "5",
                     "finalizers": [constants.FINALIZER] if finalized else []},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
    }  # fmt: skip


class Api(FakeApi):
    """The in-memory API, answering a create of the template with ``template_answer``."""

    template_answer: client.ApiError | None = None

    def create(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        if path == TEMPLATES and self.template_answer is not None:
            self.calls.append(("POST", path))
            raise self.template_answer
        return super().create(path, body, **kwargs)

    def event_reasons(self) -> list[str]:
        return [o["reason"] for p, o in self.objects.items() if p.startswith(f"{EVENTS}/")]


def reconciler(
    api: Api, *, domain: dict[str, Any], cliques: Sequence[dict[str, Any]] = (),
    nodes: Sequence[dict[str, Any]] = (), template: bool = True,
    may_write: list[bool] | None = None, claims: Sequence[dict[str, Any]] = (),
    clock: Callable[[], float] = time.monotonic,
) -> Reconciler:  # fmt: skip
    """A reconciler whose caches listed these objects; the API holds the same."""
    api.objects[DOMAIN_PATH] = copy.deepcopy(domain)
    for clique in cliques:
        name = clique["metadata"]["name"]
        api.objects[resources.CLIQUES.path(name, namespace=DRIVER_NS)] = copy.deepcopy(clique)
    templates = [objects.workload_template(Domain.parse(domain))] if template else []
    lists = {
        resources.COMPUTE_DOMAINS.path(): [domain],
        resources.NODES.path(): list(nodes),
        resources.CLIQUES.path(namespace=DRIVER_NS): list(cliques),
        resources.PODS.path(namespace=DRIVER_NS): [],
        resources.RESOURCE_CLAIMS.path(): list(claims),
        resources.RESOURCE_CLAIM_TEMPLATES.path(): [
            {**t, "metadata": {**t["metadata"], "uid": "t1"}} for t in templates
        ],
    }
    for path, items in lists.items():
        api.objects[path] = {"metadata": {"resourceVersion": "1"}, "items": copy.deepcopy(items)}
    caches = Caches(cast(client.Client, api), namespace=DRIVER_NS, on_key=lambda _: None,
                    on_relist=lambda: None)  # fmt: skip
    for informer in (caches.domains, caches.nodes, caches.cliques, caches.agents,
                     caches.templates, caches.claims):  # fmt: skip
        informer.refresh()
    allowed = may_write if may_write is not None else [True]
    stats = metrics.ControllerMetrics(prometheus_client.CollectorRegistry())
    return Reconciler(
        cast(client.Client, api), caches, limit=18,
        recorder=events.Recorder(cast(client.Client, api), component="test"),
        formation=metrics.FormationClock(stats), may_write=lambda: allowed[0], clock=clock,
    )  # fmt: skip


def clique(*daemons: dict[str, Any], version: str = "5") -> dict[str, Any]:
    body = objects.clique_object(namespace=DRIVER_NS, uid=UID, clique=C1, daemons=(), members=())
    body["metadata"] |= {"uid": "clique-1", "resourceVersion": version}
    body["daemons"] = list(daemons)
    return body


def entry(name: str, index: int, status: str = "Ready") -> dict[str, Any]:
    return {"nodeName": name, "ipAddress": "", "cliqueID": C1, "index": index, "status": status}


def test_a_replica_that_may_not_write_writes_nothing() -> None:
    api = Api()
    subject = reconciler(api, domain=domain_object(finalized=False), template=False,
                         may_write=[False])  # fmt: skip
    with pytest.raises(writes.Fenced):
        subject.reconcile(UID)
    assert api.writes() == []


def test_a_status_planned_from_an_old_copy_is_refused_and_not_reapplied() -> None:
    api = Api()
    subject = reconciler(api, domain=domain_object())
    api.objects[DOMAIN_PATH]["metadata"]["resourceVersion"] = "9"  # written since we listed
    api.objects[DOMAIN_PATH]["status"] = {"status": "NotReady", "nodesReady": "0/3"}
    with pytest.raises(writes.Stale):
        subject.reconcile(UID)
    assert api.objects[DOMAIN_PATH]["status"] == {"status": "NotReady", "nodesReady": "0/3"}
    assert [c for c in api.calls if c[1].startswith(DOMAIN_PATH)] == [
        ("PUT", f"{DOMAIN_PATH}/status")
    ]  # one attempt, no re-read


def test_a_clique_written_by_someone_else_since_the_snapshot_is_not_overwritten() -> None:
    api = Api()
    # Node a keeps its slot (a claim of the domain holds it) but has no agent: the snapshot
    # plans to write it NotReady.
    node_a = {"metadata": {"name": "a", "uid": "node-a", "resourceVersion": "1", "labels": {
        constants.COMPUTE_DOMAIN_LABEL: UID, constants.CLIQUE_LABEL: C1}}}  # fmt: skip
    held = channel_claim("c1", UID, node="a", binding=False)
    subject = reconciler(api, domain=domain_object(), cliques=[clique(entry("a", 0))],
                         nodes=[node_a], claims=[held])  # fmt: skip
    # Meanwhile another leader wrote the clique: b joined.
    newer = clique(entry("a", 0), entry("b", 1), version="8")
    path = resources.CLIQUES.path(newer["metadata"]["name"], namespace=DRIVER_NS)
    api.objects[path] = copy.deepcopy(newer)
    with pytest.raises(writes.Stale):
        subject.reconcile(UID)
    assert api.objects[path]["daemons"] == newer["daemons"]
    assert [c for c in api.calls if c[1] == path] == [("PUT", path)]  # one attempt, no re-read
    assert ("PUT", f"{DOMAIN_PATH}/status") not in api.calls  # the round ended there


def test_a_refused_template_gets_a_warning_once_and_the_status_is_still_written() -> None:
    api = Api()
    api.template_answer = client.ApiError(422, "Invalid", "metadata.name: Invalid value")
    subject = reconciler(api, domain=domain_object(), template=False)
    assert subject.reconcile(UID) is None
    assert api.event_reasons() == ["ResourceClaimTemplateRejected"]
    shown = api.objects[DOMAIN_PATH].get("status", {})
    assert shown.get("status") == "NotReady"  # nobody has joined
    assert {c["type"]: c["reason"] for c in shown["conditions"]}["Ready"] == "NoMembers"
    subject.reconcile(UID)
    assert api.event_reasons() == ["ResourceClaimTemplateRejected"]  # once
    assert api.calls.count(("POST", TEMPLATES)) == 2  # tried again: it may be fixed meanwhile


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_a_template_create_that_may_work_later_fails_the_round(status: int) -> None:
    api = Api()
    api.template_answer = client.ApiError(status, "Later", "try again")
    subject = reconciler(api, domain=domain_object(), template=False)
    with pytest.raises(client.ApiError):
        subject.reconcile(UID)
    assert api.event_reasons() == []


def test_the_snapshot_keeps_an_unreadable_clique_frozen() -> None:
    api = Api()
    listed = clique({**entry("a", 4), "fromTheFuture": True})
    subject = reconciler(api, domain=domain_object(), cliques=[listed])
    daemons = subject._caches.snapshot(domain_object(), now=NOW).cliques[C1]
    assert isinstance(daemons, Frozen)
    assert [(d.node_name, d.index) for d in daemons] == [("a", 4)]
    subject.reconcile(UID)  # "a" is not in the domain and has no agent: it would be freed
    path = resources.CLIQUES.path(listed["metadata"]["name"], namespace=DRIVER_NS)
    assert [c for c in api.writes() if c[1] == path] == []
    assert "CliqueFrozen" in api.event_reasons()


class RefusingNodes(Api):
    """The in-memory API, refusing Node patches for the nodes in ``refused`` (a webhook)."""

    refused: frozenset[str] = frozenset()

    def patch(self, path: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        if path.rsplit("/", 1)[-1] in self.refused and path.startswith("/api/v1/nodes/"):
            self.calls.append(("PATCH", path))
            raise client.ApiError(403, "Forbidden", "denied by a node policy")
        return super().patch(path, body, **kwargs)


def test_label_copies_go_after_the_status_and_a_refused_or_lost_one_holds_up_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One writer: b's refusal comes before d's write, which must still go out.
    monkeypatch.setattr("computedomains.controller.labelcopies.WRITERS", 1)
    api = RefusingNodes()
    api.refused = frozenset({"b"})
    names = ("a", "b", "c", "d")
    listed = [{"metadata": {"name": n, "uid": f"node-{n}", "resourceVersion": "1",
                            "labels": {constants.CLIQUE_LABEL: C1}}} for n in names]  # fmt: skip
    held = [channel_claim(f"c-{n}", UID, node=n, binding=False) for n in names]
    subject = reconciler(api, domain=domain_object(), nodes=listed, claims=held)
    for node in listed:
        api.objects[resources.NODES.path(node["metadata"]["name"])] = copy.deepcopy(node)
    taken = api.objects[resources.NODES.path("c")]
    taken["metadata"]["labels"][constants.COMPUTE_DOMAIN_LABEL] = "another-domain"
    api._bump(taken)  # since the snapshot: c's write conflicts, reads again, leaves it alone
    # b's refusal is reported, not raised; c's lost write brings the round back soonest.
    assert subject.reconcile(UID) == labelcopies.RETRY_SECONDS
    assert api.objects[DOMAIN_PATH]["status"]["nodes"]  # written all the same, and first:
    status_write = api.calls.index(("PUT", f"{DOMAIN_PATH}/status"))
    node_writes = [i for i, c in enumerate(api.calls) if c[1].startswith("/api/v1/nodes/")]
    assert node_writes and min(node_writes) > status_write
    labels = {n: api.objects[resources.NODES.path(n)]["metadata"]["labels"] for n in names}
    held_by = {n: v.get(constants.COMPUTE_DOMAIN_LABEL, "") for n, v in labels.items()}
    assert held_by == {"a": UID, "b": "", "c": "another-domain", "d": UID}
    api.refused = frozenset()
    again = subject.reconcile(UID)  # c's lost write: planned again shortly
    assert again == labelcopies.RETRY_SECONDS
    b_labels = api.objects[resources.NODES.path("b")]["metadata"]["labels"]
    assert b_labels[constants.COMPUTE_DOMAIN_LABEL] == UID


def _labelled_node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"node-{name}", "resourceVersion": "1",
                         "labels": {constants.CLIQUE_LABEL: C1}}}  # fmt: skip


def test_a_persistently_refused_label_holds_up_neither_the_status_nor_its_own_report() -> None:
    """A refused label copy is reported once and tried again on its own; the round neither
    fails (its backoff would replace the come-back of a status held back) nor waits."""
    now = [100.0]
    api = RefusingNodes()
    api.refused = frozenset({"b"})
    listed = [_labelled_node(n) for n in ("a", "b")]
    held = [channel_claim(f"c-{n}", UID, node=n, binding=False) for n in ("a", "b")]
    subject = reconciler(api, domain=domain_object(), nodes=listed, claims=held,
                         clock=lambda: now[0])  # fmt: skip
    for node in [*listed, _labelled_node("c")]:
        api.objects[resources.NODES.path(node["metadata"]["name"])] = copy.deepcopy(node)

    def refusals() -> list[str]:
        return [o["message"] for p, o in api.objects.items()
                if p.startswith(f"{EVENTS}/") and o["reason"] == "NodeLabelRefused"]  # fmt: skip

    # The status is written, b's refusal reported (once, naming the node and the API's
    # answer), and the round ends well: it comes back for the label on its own.
    assert subject.reconcile(UID) == labelcopies.REFUSED_RETRY_SECONDS
    shown = {n["name"] for n in api.objects[DOMAIN_PATH]["status"]["nodes"]}
    assert shown == {"a", "b"}
    (message,) = refusals()
    assert "node b:" in message and "403 Forbidden: denied by a node policy" in message
    assert constants.COMPUTE_DOMAIN_LABEL in message

    # c joins within the status interval: its slot goes out now, the status is held back,
    # and the round comes back when the status is due, not after the refusal's retry.
    def relist_nodes() -> None:
        """The node cache as a watch would have it: the labels written so far."""
        api.objects[resources.NODES.path()]["items"] = [
            copy.deepcopy(api.objects[resources.NODES.path(n)]) for n in ("a", "b", "c")
        ]
        subject._caches.nodes.refresh()

    relist_nodes()
    api.objects[resources.RESOURCE_CLAIMS.path()]["items"].append(
        channel_claim("c-c", UID, node="c", binding=False)
    )
    subject._caches.claims.refresh()
    now[0] += 0.5
    assert subject.reconcile(UID) == pytest.approx(STATUS_INTERVAL - 0.5)
    relist_nodes()
    now[0] += STATUS_INTERVAL
    assert subject.reconcile(UID) == labelcopies.REFUSED_RETRY_SECONDS  # the status, written:
    shown = {n["name"] for n in api.objects[DOMAIN_PATH]["status"]["nodes"]}
    assert shown == {"a", "b", "c"}
    assert len(refusals()) == 1  # b was refused three times, reported once
    assert api.calls.count(("PATCH", resources.NODES.path("b"))) == 3

    # The refusal ends: the label is written and nothing more is owed.
    api.refused = frozenset()
    relist_nodes()
    now[0] += STATUS_INTERVAL
    assert subject.reconcile(UID) is None
    b_labels = api.objects[resources.NODES.path("b")]["metadata"]["labels"]
    assert b_labels[constants.COMPUTE_DOMAIN_LABEL] == UID
