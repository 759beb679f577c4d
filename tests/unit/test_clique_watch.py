"""CliqueWatch: the clique objects of the node's clique only, following the clique."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from computedomains.api import constants, models
from computedomains.kube import cliquewatch


def _clique(uid: str, clique: str, *, name: str = "") -> dict[str, Any]:
    labels = {constants.COMPUTE_DOMAIN_LABEL: uid, constants.CLIQUE_ID_LABEL: clique}
    name = name or models.clique_name(uid, clique)
    return {"metadata": {"uid": f"o-{name}", "name": name, "labels": labels}}


class Cliques:
    """Lists clique objects by label selector; its watch streams stay empty."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.selectors: list[str] = []
        self.closed = threading.Event()

    def get(self, path: str, *, query: Mapping[str, str]) -> dict[str, Any]:
        selector = query.get("labelSelector", "")
        self.selectors.append(selector)
        key, _, value = selector.partition("=")
        items = [o for o in self.objects if o["metadata"]["labels"].get(key) == value]
        return {"items": items, "metadata": {"resourceVersion": "1"}}

    def stream(self, path: str, *, query: Mapping[str, str], timeout: float) -> Iterator[Any]:
        self.closed.wait(0.05)  # an idle watch that the server ends now and then
        return iter(())


def test_only_the_followed_cliques_objects_are_seen_and_the_watch_follows_the_clique() -> None:
    api = Cliques(
        _clique("d1", "c1"),
        _clique("d2", "c1"),
        _clique("d3", "c1", name="stray"),  # labelled for c1, not named as its object
        _clique("d1", "c2"),
    )
    changes = threading.Event()
    watch = cliquewatch.CliqueWatch(api, namespace="drv", on_change=changes.set)
    try:
        assert watch.listed() and watch.by_domain() == {}  # no clique: nothing to list
        watch.follow("c1")
        assert watch.wait_listed(5)
        assert set(watch.by_domain()) == {"d1", "d2"}
        assert changes.is_set()  # the first list wakes the owner
        watch.follow("c2")
        assert watch.wait_listed(5)
        assert watch.by_domain() == {"d1": api.objects[3]}
        assert api.selectors[0] == f"{constants.CLIQUE_ID_LABEL}=c1"
        assert api.selectors[-1] == f"{constants.CLIQUE_ID_LABEL}=c2"
        watch.follow("")
        assert watch.listed() and watch.by_domain() == {}
    finally:
        watch.stop()
        api.closed.set()
