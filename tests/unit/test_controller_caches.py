"""Which domains a change concerns: the work-queue keys the caches derive from events."""

from __future__ import annotations

import copy
from typing import Any, cast

from computedomains.api import constants, models, placement
from computedomains.controller import turnactivity, turns
from computedomains.controller.caches import Caches
from computedomains.kube import client
from tests.support.channelclaims import channel_claim
from tests.support.fakeapi import FakeApi


def node(name: str, domain: str = "", clique: str = "c1", rv: str = "1") -> dict[str, Any]:
    labels = {constants.CLIQUE_LABEL: clique, "other": rv}
    if domain:
        labels[constants.COMPUTE_DOMAIN_LABEL] = domain
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv,
                         "labels": labels}}  # fmt: skip


def test_node_events_name_the_old_and_new_domain_and_heartbeats_nothing() -> None:
    keys: list[str] = []
    caches = Caches(cast(client.Client, FakeApi()), namespace="drv", on_key=keys.append,
                    on_relist=lambda: None)  # fmt: skip
    on_change = caches.changes.node_changed  # what the node informer calls
    on_change("ADDED", node("a", "d1"))
    assert keys == ["d1"]
    on_change("MODIFIED", node("a", "d1", rv="2"))  # a heartbeat, another label
    assert keys == ["d1"]
    on_change("MODIFIED", node("a", ""))  # left: the old domain must hear of it
    assert keys == ["d1", "d1"]
    on_change("MODIFIED", node("a", "d2"))
    assert keys[-1] == "d2"
    on_change("MODIFIED", node("a", "d2", clique="c2"))  # moved cliques
    assert keys[-1] == "d2"
    on_change("DELETED", node("a", "d2", clique="c2"))
    assert keys[-1] == "d2"
    assert len(keys) == 5


def _domain(uid: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": "1"}}


def _allocated(uid: str, domain: str, node_name: str, *, generated: bool = True) -> dict[str, Any]:
    claim = channel_claim(uid, domain, node=node_name, binding=False)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "p"}]
    claim["spec"] = {"devices": {
        "requests": [{"name": "channel",
                      "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}],
        "config": claim["status"]["allocation"]["devices"]["config"],
    }}  # fmt: skip
    if generated:
        claim["metadata"]["ownerReferences"] = [
            {"kind": "Pod", "name": "p", "uid": "p", "controller": True}
        ]
    return claim


def _released(claim: dict[str, Any]) -> dict[str, Any]:
    """As the ResourceClaim controller leaves a claim whose pod is gone, before deleting it."""
    claim = copy.deepcopy(claim)
    del claim["status"]["allocation"], claim["status"]["reservedFor"]
    assert placement.asks_for_a_channel(claim)
    return claim


def _clique(domain: str, members: set[str], rv: str = "1") -> dict[str, Any]:
    """A clique object of ``domain`` naming ``members`` (the record)."""
    annotations = {constants.CLIQUE_MEMBERS_ANNOTATION: models.clique_members_value(members)}
    return {"metadata": {"name": f"{domain}.c1", "uid": f"clique-{domain}", "resourceVersion": rv,
                         "labels": {constants.COMPUTE_DOMAIN_LABEL: domain},
                         "annotations": annotations}}  # fmt: skip


def test_the_record_names_the_holder_and_a_label_alone_names_none() -> None:
    caches = _caches()
    caches.changes.node_changed("ADDED", node("a", "d2"))
    caches.cliques._put("clique-d1", _clique("d1", {"a"}))
    assert (caches.recorded("a"), caches.recorded("b")) == ("d1", "")
    caches.cliques._put("clique-d2", _clique("d2", {"a"}))
    assert caches.recorded("a") == ""  # two name it: one of them is about to let go


def _caches() -> Caches:
    caches = Caches(cast(client.Client, FakeApi()), namespace="drv", on_key=lambda _: None,
                    on_relist=lambda: None)  # fmt: skip
    caches.domains._put("d1", _domain("d1"))
    return caches


def test_a_claim_waits_on_its_node_until_labelled_for_its_domain_then_has_landed() -> None:
    caches = _caches()
    activity = turnactivity.Reader(caches)
    # Allocated on its turn, node not labelled yet: still placing (its node looks free).
    claim = _allocated("c1", "d1", "a")
    caches.claims._put("c1", claim)
    assert activity.read() == ({"d1": turns.Activity(1, 1)}, frozenset())
    # Another domain's label (a job that is ending) is not this claim's prepare.
    caches.changes.node_changed("ADDED", node("a", "d0"))
    assert activity.read()[0] == {"d1": turns.Activity(1, 1)}
    # Prepared there: the label holds the node for d1.
    caches.changes.node_changed("MODIFIED", node("a", "d1", rv="2"))
    assert activity.read()[0] == {"d1": turns.Activity(0, 1)}
    # The pod ends: the node is unprepared (unlabelled) while the pod is still reserved. The
    # claim has landed, so its domain does not place again.
    caches.changes.node_changed("MODIFIED", node("a", "", rv="3"))
    assert activity.read()[0] == {"d1": turns.Activity(0, 1)}
    # Its pod gone, the ResourceClaim controller deallocates it before deleting it.
    caches.claims._put("c1", _released(claim))
    assert activity.read()[0] == {"d1": turns.Activity(0, 0)}


def test_a_claim_made_by_hand_waits_again_when_a_new_pod_needs_it() -> None:
    caches = _caches()
    activity = turnactivity.Reader(caches)
    claim = _allocated("c1", "d1", "a", generated=False)
    caches.claims._put("c1", claim)
    caches.changes.node_changed("ADDED", node("a", "d1"))
    assert activity.read()[0] == {"d1": turns.Activity(0, 1)}
    # Deallocated when its pod ended, it stays (nobody deletes it): a new pod waits for it.
    caches.claims._put("c1", _released(claim))
    waiting = activity.read()[0]["d1"]
    assert (waiting.waiting, waiting.allocated) == (1, 0)
    # Allocated again, on a node not labelled: placing until its prepare labels it.
    again = channel_claim("c1", "d1", node="b", at="2026-01-01T00:09:00Z", binding=False)
    caches.claims._put("c1", {**again, "spec": claim["spec"]})
    assert activity.read()[0] == {"d1": turns.Activity(1, 1)}


def test_a_deleted_domains_waiting_claims_are_reported() -> None:
    caches = _caches()
    activity = turnactivity.Reader(caches)
    caches.claims._put("c1", _allocated("c1", "d1", "a"))
    caches.domains._put("d1", {**_domain("d1"), "metadata": {
        **_domain("d1")["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})  # fmt: skip
    assert activity.read() == ({}, frozenset({"d1"}))


def test_placement_news_reach_the_listeners_set_after_construction() -> None:
    nodes: list[str] = []
    placements: list[bool] = []
    caches = _caches()
    caches.listen(on_node=nodes.append, on_placement=lambda: placements.append(True))
    caches.changes.node_changed("ADDED", node("a", "d1"))  # the label decides nothing
    assert nodes == []
    caches.changes.clique_changed("ADDED", _clique("d1", {"a"}))  # a holder recorded: placed anew
    caches.changes.clique_changed("MODIFIED", _clique("d1", {"a"}, rv="2"))  # the same members
    assert nodes == ["a"]
    caches.changes.clique_changed("MODIFIED", _clique("d1", {"b"}, rv="3"))  # a left, b joined
    assert sorted(nodes) == ["a", "a", "b"]
    caches.changes.domain_changed("ADDED", _domain("d2"))
    assert placements == [True]


def test_a_claim_of_another_namespace_counts_for_a_domain_not_even_once_it_is_deleted() -> None:
    """Review found: a deleted domain left the cache and with it its namespace, so a claim of
    another namespace naming it counted again (and could keep its leftovers)."""
    caches = _caches()
    caches.changes.domain_changed("ADDED", _domain("d1"))
    assert caches.counts("d1", "ns") and not caches.counts("d1", "elsewhere")
    caches.domains._put("d1", None)
    caches.changes.domain_changed("DELETED", _domain("d1"))
    assert caches.counts("d1", "ns") and not caches.counts("d1", "elsewhere")
    assert caches.namespace_of("d1") is None  # to the binder it is gone
    # Seen only in a listing (deleted while the watch was down), it is remembered as well.
    caches.domains._put("d2", {**_domain("d2"), "metadata": {**_domain("d2")["metadata"],
                                                               "namespace": "ns2"}})  # fmt: skip
    caches.changes.domains_relisted()
    caches.domains._put("d2", None)
    assert not caches.counts("d2", "ns") and caches.counts("d2", "ns2")
    # A domain never seen keeps its claims (the binder refuses them as naming no domain).
    assert caches.counts("unknown", "anywhere")


def test_a_relist_tells_the_binder_of_foreign_claims_waiting_on_a_node_too() -> None:
    """A claim of another namespace is refused by the binder: after a relist, as when it is
    made, its node is news (review found a relist counted only the domain's own claims)."""
    caches = _caches()
    nodes: list[str] = []
    caches.listen(on_node=nodes.append, on_placement=lambda: None)
    foreign = channel_claim("c9", "d1", node="b")
    foreign["metadata"]["namespace"] = "elsewhere"
    caches.claims._put("c9", foreign)
    caches.changes.claims_relisted()
    assert nodes == ["b"]
