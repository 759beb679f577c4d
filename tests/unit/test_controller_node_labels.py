"""The node label as the controller keeps it: a copy of the record, written with a precondition."""

from __future__ import annotations

from typing import Any

from computedomains.api import constants
from computedomains.controller import nodelabels
from computedomains.controller.views import Claim
from computedomains.kube import nodes
from tests.support.fakeapi import FakeApi
from tests.support.snapshots import C1, UID, daemon, node, snapshot

NODE = nodes.path("n1")
KEY = constants.COMPUTE_DOMAIN_LABEL


def _label(api: FakeApi) -> str | None:
    value = api.objects[NODE]["metadata"].get("labels", {}).get(KEY)
    return str(value) if value is not None else None


def _api(labels: dict[str, str]) -> FakeApi:
    api = FakeApi(objects={NODE: {"metadata": {"name": "n1", "labels": dict(labels)}}})
    api._bump(api.objects[NODE])
    return api


def _set(api: FakeApi, *, expected: str, value: str, version: str = "") -> bool:
    return nodes.set_label_if(
        api, "n1", KEY, expected=expected, value=value, resource_version=version
    )


def test_a_current_cached_version_costs_one_write_and_keeps_other_labels() -> None:
    api = _api({"other": "x"})
    version = api.objects[NODE]["metadata"]["resourceVersion"]
    assert _set(api, expected="", value="d1", version=version)
    assert _label(api) == "d1" and api.objects[NODE]["metadata"]["labels"]["other"] == "x"
    assert api.writes() == [("PATCH", NODE)] and len(api.calls) == 1


def test_a_node_changed_since_the_cache_is_read_again_and_checked() -> None:
    api = _api({})
    stale = api.objects[NODE]["metadata"]["resourceVersion"]
    api._bump(api.objects[NODE])  # a heartbeat: the label is still as expected
    assert _set(api, expected="", value="d1", version=stale)
    assert _label(api) == "d1"
    # Someone else labelled it meanwhile: left alone.
    stale = api.objects[NODE]["metadata"]["resourceVersion"]
    api.objects[NODE]["metadata"]["labels"][KEY] = "d2"
    api._bump(api.objects[NODE])
    assert not _set(api, expected="d1", value="", version=stale)
    assert _label(api) == "d2"


def test_removal_needs_the_expected_value_and_a_gone_node_is_no_error() -> None:
    api = _api({KEY: "d1"})
    assert not _set(api, expected="d2", value="")
    assert _label(api) == "d1"
    assert _set(api, expected="d1", value="")
    assert _label(api) is None
    del api.objects[NODE]
    assert not _set(api, expected="", value="d1")


def _writes(*nodes_: Any, release: bool = False) -> dict[str, tuple[str, str]]:
    snap = snapshot(nodes=list(nodes_), cliques={})
    return {w.node: (w.expected, w.value) for w in nodelabels.plan(snap, release=release)}


def test_the_label_names_every_member_and_no_other_node() -> None:
    member = Claim.HELD
    unlabelled, stale = node("a", domain="", claim=member), node("b", domain="other", claim=member)
    assert _writes(unlabelled, stale, node("c")) == {
        "a": ("", UID),  # a member not labelled yet
        "b": ("other", UID),  # a stale label of the domain it left
    }
    assert _writes(node("a", claim=Claim.NONE), node("b", claim=Claim.ALLOCATED)) == {
        "a": (UID, ""),  # forged, or left with its last claim
        "b": (UID, ""),  # another domain holds it
    }
    assert _writes(node("a", domain="other", claim=Claim.NONE)) == {}  # not ours to touch
    assert _writes(node("a"), release=True) == {"a": (UID, "")}
    listed = snapshot(nodes=[node("a", claim=Claim.NONE)], cliques={C1: (daemon("a", 0),)})
    assert {w.node for w in nodelabels.plan(listed)} == {"a"}  # a slot is no membership
