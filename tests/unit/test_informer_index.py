"""Informer indexes: kept right through a list, changes, moves between keys and deletions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from computedomains.kube import client
from computedomains.kube.informer import Informer


def _node(uid: str, domain: str, rv: str) -> dict[str, Any]:
    labels = {"domain": domain} if domain else {}
    return {"metadata": {"uid": uid, "name": f"n-{uid}", "labels": labels, "resourceVersion": rv}}


class FakeApi:
    """A list, then one watch stream of the given events; the informer stops after it."""

    def __init__(self, listed: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.listed, self.events = listed, events
        self.informer: Informer | None = None

    def get(self, path: str, *, query: Mapping[str, str]) -> dict[str, Any]:
        return {"items": self.listed, "metadata": {"resourceVersion": "1"}}

    def stream(self, path: str, *, query: Mapping[str, str], timeout: float) -> Iterator[Any]:
        yield from self.events
        assert self.informer is not None
        self.informer.stop()


def _names(informer: Informer, key: str) -> set[str]:
    return {o["metadata"]["name"] for o in informer.by_index("domain", key)}


def test_an_index_follows_lists_changes_and_deletions() -> None:
    events = [
        {"type": "MODIFIED", "object": _node("a", "d2", "2")},  # moves from d1 to d2
        {"type": "ADDED", "object": _node("c", "d1", "3")},
        {"type": "DELETED", "object": _node("b", "d1", "4")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}},
    ]
    api = FakeApi([_node("a", "d1", "1"), _node("b", "d1", "1"), _node("z", "", "1")], events)
    informer = Informer(
        api,
        path="/api/v1/nodes",
        indexes={"domain": lambda o: [v for v in [o["metadata"]["labels"].get("domain")] if v]},
    )
    api.informer = informer
    version = informer.refresh()
    assert _names(informer, "d1") == {"n-a", "n-b"} and _names(informer, "d2") == set()
    informer._watch(version)  # the events above, then stop
    assert _names(informer, "d1") == {"n-c"}
    assert _names(informer, "d2") == {"n-a"}
    assert _names(informer, "") == set()  # an object without a key is in no bucket
    assert len(informer.items()) == 3


class _ServedAt(FakeApi):
    """Serves the list at one path only; every other path is a version not served (404)."""

    def __init__(self, served: str, listed: list[dict[str, Any]]) -> None:
        super().__init__(listed, [])
        self.served = served
        self.asked: list[str] = []

    def get(self, path: str, *, query: Mapping[str, str]) -> dict[str, Any]:
        self.asked.append(path)
        if path != self.served:
            raise client.ApiError(404, "NotFound", "404 page not found")
        return super().get(path, query=query)


def test_a_version_not_served_falls_back_to_the_next_one() -> None:
    """A CRD rolled back to 0.1.x serves v1beta1 only: the watch of an agent of this release,
    left running, lists its objects there instead of failing for ever."""
    old, new = "/apis/g/v1beta1/cliques", "/apis/g/v1beta2/cliques"
    api = _ServedAt(old, [_node("a", "d1", "1")])
    informer = Informer(api, path=new, fallback_paths=(old,))
    api.informer = informer
    informer.start()
    informer.wait_synced(10)
    assert api.asked[:2] == [new, old]
    assert [o["metadata"]["name"] for o in informer.items()] == ["n-a"]
