"""Which domains a change concerns: the work-queue keys the caches derive from events."""

from __future__ import annotations

from typing import Any, cast

from computedomains.api import constants
from computedomains.controller.caches import Caches
from computedomains.kube import client
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
