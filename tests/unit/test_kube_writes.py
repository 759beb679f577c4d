"""Conflict-safe writes: retried or planned updates on 409, and the cache of our own writes."""

from __future__ import annotations

from typing import Any, cast

import pytest

from computedomains.kube import client, writes
from tests.support.fakeapi import FakeApi

PATH = "/apis/x/v1/namespaces/ns/things/a"


def stored(api: FakeApi, **fields: Any) -> dict[str, Any]:
    api.objects[PATH] = {"metadata": {"name": "a", "uid": "u1", "resourceVersion": "5"}, **fields}
    return api.objects[PATH]


def add_item(obj: dict[str, Any]) -> dict[str, Any] | None:
    items = obj.setdefault("items", [])
    if "mine" in items:
        return None
    items.append("mine")
    return obj


def test_an_update_from_a_fresh_copy_writes_once_with_its_resource_version() -> None:
    api = FakeApi()
    current = dict(stored(api, items=["theirs"]))
    result = writes.read_modify_write(cast(client.Client, api), PATH, add_item, current=current)
    assert result is not None
    assert api.objects[PATH]["items"] == ["theirs", "mine"]
    assert api.calls == [("PUT", PATH)]  # no read: the caller's copy was used


def test_a_conflict_rereads_and_recomputes_without_losing_the_other_write() -> None:
    api = FakeApi()
    stale = {"metadata": {"name": "a", "resourceVersion": "1"}, "items": []}
    stored(api, items=["theirs"])
    writes.read_modify_write(cast(client.Client, api), PATH, add_item, current=stale)
    assert api.objects[PATH]["items"] == ["theirs", "mine"]
    assert api.calls == [("PUT", PATH), ("GET", PATH), ("PUT", PATH)]


def test_nothing_to_change_writes_nothing() -> None:
    api = FakeApi()
    stored(api, items=["mine"])
    assert writes.read_modify_write(cast(client.Client, api), PATH, add_item) is None
    assert api.writes() == []


def test_the_status_subresource_is_addressed_and_persistent_conflicts_are_raised() -> None:
    api = FakeApi()
    stored(api)
    api.conflicts_to_inject = 3
    with pytest.raises(client.ApiError) as raised:
        writes.read_modify_write(
            cast(client.Client, api), PATH, add_item, subresource="status", attempts=3
        )
    assert raised.value.status == 409
    assert [c for c in api.calls if c[0] == "PUT"] == [("PUT", f"{PATH}/status")] * 3


def set_items(items: list[str]) -> writes.Mutation:
    """A planned change: the list as the plan computed it, whatever the object holds now."""

    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["items"] = items
        return obj

    return mutate


def test_a_planned_write_from_the_current_version_is_written_once() -> None:
    api = FakeApi()
    current = dict(stored(api, items=["old"]))
    result = writes.write_planned(
        cast(client.Client, api), PATH, set_items(["planned"]), current=current
    )
    assert result is not None
    assert api.objects[PATH]["items"] == ["planned"]
    assert api.calls == [("PUT", PATH)]


def test_a_planned_write_from_an_old_version_is_refused_and_never_reapplied() -> None:
    api = FakeApi()
    planned_from = {"metadata": {"name": "a", "resourceVersion": "1"}, "items": ["old"]}
    stored(api, items=["newer"])  # another writer got there first
    with pytest.raises(writes.Stale) as raised:
        writes.write_planned(
            cast(client.Client, api), PATH, set_items(["planned"]), current=planned_from
        )
    assert raised.value.status == 409
    assert api.objects[PATH]["items"] == ["newer"]
    assert api.calls == [("PUT", PATH)]  # no re-read, no second attempt


def test_a_planned_write_raises_other_refusals_as_they_are() -> None:
    api = FakeApi()
    with pytest.raises(client.ApiError) as raised:
        writes.write_planned(
            cast(client.Client, api), PATH, set_items([]), current=stored(FakeApi())
        )
    assert raised.value.status == 404
    assert not isinstance(raised.value, writes.Stale)


def obj(uid: str, version: int, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": str(version)}, **fields}


def test_mutation_cache_prefers_our_newer_write_until_the_informer_catches_up() -> None:
    cache = writes.MutationCache()
    cache.wrote(obj("a", 7, v="ours"))
    assert cache.overlay([obj("a", 6, v="old")]) == [obj("a", 7, v="ours")]
    assert cache.overlay([obj("a", 7, v="ours")]) == [obj("a", 7, v="ours")]
    # Caught up: from now on the informer's copy is used, even a newer foreign write.
    assert cache.overlay([obj("a", 9, v="theirs")]) == [obj("a", 9, v="theirs")]
    assert cache.overlay([obj("a", 6, v="old")]) == [obj("a", 6, v="old")]


def test_mutation_cache_adds_our_creations_and_hides_our_deletions() -> None:
    cache = writes.MutationCache()
    cache.wrote(obj("new", 3))
    cache.deleted("gone")
    assert cache.overlay([obj("gone", 2), obj("other", 1)]) == [obj("other", 1), obj("new", 3)]


def test_mutation_cache_entries_expire() -> None:
    now = [0.0]
    cache = writes.MutationCache(ttl=10, clock=lambda: now[0])
    cache.wrote(obj("a", 7))
    cache.deleted("b")
    now[0] = 11
    assert cache.overlay([obj("a", 6), obj("b", 1)]) == [obj("a", 6), obj("b", 1)]
