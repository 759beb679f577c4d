"""Which domains a change concerns: the work-queue keys the caches derive from events."""

from __future__ import annotations

from typing import Any, cast

from computedomains.api import constants, placement
from computedomains.controller import turns
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
    on_change = caches._node_changed  # what the node informer calls
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


def _allocated(uid: str, domain: str, node_name: str, *, pods: list[str]) -> dict[str, Any]:
    claim = channel_claim(uid, domain, node=node_name, binding=False)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": p} for p in pods]
    return claim


def test_a_claim_waits_on_an_unlabelled_node_only_until_it_landed_and_while_reserved() -> None:
    caches = Caches(cast(client.Client, FakeApi()), namespace="drv", on_key=lambda _: None,
                    on_relist=lambda: None)  # fmt: skip
    caches.domains._put("d1", _domain("d1"))
    # Allocated on its turn, node not labelled yet: still placing (its node looks free).
    caches.claims._put("c1", _allocated("c1", "d1", "a", pods=["p1"]))
    assert caches.placement_activity() == {"d1": turns.Activity(waiting=1, allocated=1)}
    # Prepared there: the label holds the node.
    caches._node_changed("ADDED", node("a", "d1"))
    assert caches.placement_activity() == {"d1": turns.Activity(waiting=0, allocated=1)}
    # The pod ends: the node is unprepared (unlabelled) while the pod is still reserved. The
    # claim has landed, so its domain does not place again.
    caches._node_changed("MODIFIED", node("a", "", rv="2"))
    assert caches.placement_activity() == {"d1": turns.Activity(waiting=0, allocated=1)}
    # Its pod gone, the ResourceClaim controller deallocates it before deleting it.
    released = _allocated("c1", "d1", "a", pods=[])
    del released["status"]["allocation"]
    request = {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}
    released["spec"] = {"devices": {"requests": [request]}}
    assert placement.asks_for_a_channel(released)
    caches.claims._put("c1", released)
    assert caches.placement_activity() == {"d1": turns.Activity(waiting=0, allocated=0)}
    # A pod gone before its node was ever labelled: its claim waits for nothing either.
    caches.claims._put("c2", _allocated("c2", "d1", "b", pods=[]))
    assert caches.placement_activity() == {"d1": turns.Activity(waiting=0, allocated=1)}
