"""Conversion between v1beta1 and v1beta2: examples, invalid input, and round trips as a
property over generated objects (shaped as the API server serves them)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from computedomains.api import constants, models
from computedomains.api.conversion import ConversionError, convert

V1, V2 = constants.API_VERSION, constants.API_VERSION_V1BETA2
NUM_NODES, PLACEMENT = constants.NUM_NODES_ANNOTATION, constants.PLACEMENT_ANNOTATION
CHANNEL = {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": "Single"}


def v1(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "ComputeDomain", "metadata": {"name": "cd"},
            "spec": {"numNodes": 0, "channel": CHANNEL, **spec}}  # fmt: skip


def v2(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cd"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": V2, "kind": "ComputeDomain", "metadata": meta,
            "spec": {"channel": CHANNEL, **spec}}  # fmt: skip


# -- examples -----------------------------------------------------------------------------


def test_num_nodes_moves_to_the_annotation_and_back() -> None:
    assert convert(v1(numNodes=4), V2) == v2({NUM_NODES: "4"})
    assert convert(v2({NUM_NODES: "4"}), V1) == v1(numNodes=4)


@pytest.mark.parametrize("count", [10**18, 2**63 - 1])
def test_every_int64_num_nodes_round_trips(count: int) -> None:
    """Found by generated input: a v1beta1 numNodes of 19 digits was stored, and its read at
    v1beta1 failed (the annotation parser stopped at 18 digits)."""
    assert convert(convert(v1(numNodes=count), V2), V1) == v1(numNodes=count)


def test_a_num_nodes_annotation_past_int64_is_refused_naming_it() -> None:
    with pytest.raises(ConversionError, match=r"num-nodes\]: expected a number of nodes up to"):
        convert(v2({NUM_NODES: str(2**63)}), V1)


def test_zero_num_nodes_needs_no_annotation_and_comes_back_as_the_default() -> None:
    assert convert(v1(), V2) == v2()
    assert convert(v2(), V1) == v1()  # numNodes: 0, as the v1beta1 default fills in


def test_placement_moves_to_the_annotation_and_back() -> None:
    required = v2(placement={"clique": "Required"})
    down = convert(required, V1)
    assert down == {
        **v1(),
        "metadata": {"name": "cd", "annotations": {PLACEMENT: '{"clique":"Required"}'}},
    }
    assert convert(down, V2) == required
    models.ComputeDomain.from_dict(down)  # a valid v1beta1 object


def test_v1beta2_only_status_is_dropped_and_v1beta1_status_kept() -> None:
    status = {
        "status": "Ready",
        "nodesReady": "1/1",
        "nodes": [
            {"name": "a", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}
        ],
    }
    full = {**v2(), "status": {**status, "conditions": [{"type": "Ready"}], "cliques": []}}
    assert convert(full, V1)["status"] == status
    assert convert({**v1(), "status": status}, V2)["status"] == status


def test_other_annotations_fields_and_metadata_are_kept() -> None:
    obj = v1(numNodes=2)
    obj["metadata"] |= {"annotations": {"a": "b"}, "labels": {"l": "v"}, "uid": "u"}
    obj["spec"]["future"] = {"x": 1}
    up = convert(obj, V2)
    assert up["metadata"] == {"name": "cd", "annotations": {"a": "b", NUM_NODES: "2"},
                              "labels": {"l": "v"}, "uid": "u"}  # fmt: skip
    assert up["spec"]["future"] == {"x": 1}
    assert convert(up, V1) == obj


def test_an_object_without_spec_converts_without_one() -> None:
    bare = {"apiVersion": V1, "kind": "ComputeDomain", "metadata": {"name": "cd"}}
    assert convert(bare, V2) == {**bare, "apiVersion": V2}
    assert convert({**bare, "apiVersion": V2}, V1) == bare


def test_num_nodes_wins_over_a_stale_annotation() -> None:
    obj = v1(numNodes=3)
    obj["metadata"]["annotations"] = {NUM_NODES: "9"}
    assert convert(obj, V2)["metadata"]["annotations"] == {NUM_NODES: "3"}
    obj["spec"]["numNodes"] = 0
    assert "annotations" not in convert(obj, V2)["metadata"]


def test_same_version_is_a_copy() -> None:
    obj = v2({NUM_NODES: "x"})  # even one that would not convert
    out = convert(obj, V2)
    assert out == obj and out is not obj
    out["metadata"]["name"] = "changed"
    assert obj["metadata"]["name"] == "cd"


def test_cliques_only_change_apiversion() -> None:
    clique = {
        "apiVersion": V1,
        "kind": "ComputeDomainClique",
        "metadata": {"name": "u.c"},
        "daemons": [{"nodeName": "a", "ipAddress": "", "cliqueID": "c", "index": 0}],
    }
    assert convert(clique, V2) == {**clique, "apiVersion": V2}
    assert convert(convert(clique, V2), V1) == clique


def test_the_input_is_not_changed() -> None:
    obj = v2({NUM_NODES: "2"}, placement={"clique": "Preferred"})
    before = copy.deepcopy(obj)
    convert(obj, V1)
    assert obj == before


# -- what cannot be converted -------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "target", "field", "words"),
    [
        ({**v1(), "apiVersion": "resource.nvidia.com/v2"}, V2, "apiVersion", "unsupported version"),
        (v1(), "resource.nvidia.com/v9", "apiVersion", "unsupported target version"),
        ({**v1(), "kind": "Pod"}, V2, "kind", "cannot convert kind 'Pod'"),
        (v1(numNodes=-1), V2, "spec.numNodes", "expected an integer >= 0, got -1"),
        (v1(numNodes="3"), V2, "spec.numNodes", "expected an integer >= 0, got '3'"),
        (v1(numNodes=True), V2, "spec.numNodes", "got True"),
        ({**v1(), "spec": [1]}, V2, "spec", "expected an object"),
        ({**v1(), "metadata": {"annotations": {PLACEMENT: "{"}}}, V2,
         f"metadata.annotations[{PLACEMENT}]", "not JSON"),
        # Found by tests/cluster/with_chart/test_generated_input.py's generated annotations.
        ({**v1(), "metadata": {"annotations": {PLACEMENT: "9" * 10_300}}}, V2,
         f"metadata.annotations[{PLACEMENT}]", "not JSON: Exceeds the limit (4300 digits)"),
        ({**v1(), "metadata": {"annotations": {PLACEMENT: "[" * 100_000}}}, V2,
         f"metadata.annotations[{PLACEMENT}]", "not JSON: maximum recursion depth"),
        ({**v1(), "metadata": {"annotations": {PLACEMENT: '{"clique":"Always"}'}}}, V2,
         f"metadata.annotations[{PLACEMENT}].clique", 'unsupported value "Always"'),
        ({**v1(), "metadata": {"annotations": {PLACEMENT: '"Required"'}}}, V2,
         f"metadata.annotations[{PLACEMENT}]", "expected an object"),
        ({**v1(), "metadata": {"annotations": "none"}}, V2, "metadata.annotations",
         "expected an object"),
        (v2({NUM_NODES: "four"}), V1, f"metadata.annotations[{NUM_NODES}]",
         "expected a decimal number of nodes, got 'four'"),
        (v2({NUM_NODES: "-2"}), V1, f"metadata.annotations[{NUM_NODES}]", "decimal"),
        (v2(placement={"clique": 1}), V1, "spec.placement.clique", "expected a string"),
        (v2(placement="Required"), V1, "spec.placement", "expected an object"),
    ],
)  # fmt: skip
def test_invalid_input_names_the_field(
    obj: dict[str, Any], target: str, field: str, words: str
) -> None:
    with pytest.raises(ConversionError) as info:
        convert(obj, target)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert words in info.value.message
    assert isinstance(info.value, ValueError)


# -- round trips over generated objects ---------------------------------------------------

names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
keys = st.from_regex(r"([a-z]{1,8}\.io/)?[a-z][-a-z0-9]{0,10}", fullmatch=True).filter(
    lambda k: k not in (NUM_NODES, PLACEMENT)
)
text = st.text(max_size=20)
statuses = st.sampled_from(["Ready", "NotReady"])
channels = st.fixed_dictionaries(
    {"resourceClaimTemplate": st.fixed_dictionaries({"name": names})},
    optional={"allocationMode": st.sampled_from(["Single", "All"])},
)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    """metadata as served: empty maps are left out (the API server omits them)."""
    meta: dict[str, Any] = {"name": draw(names), "namespace": draw(names), "uid": draw(text)}
    for key in ("labels", "annotations"):
        values = draw(st.dictionaries(keys, text, max_size=3))
        if values:
            meta[key] = values
    if draw(st.booleans()):
        meta["finalizers"] = [constants.FINALIZER]
    return meta


node_entries = st.fixed_dictionaries(
    {"name": names, "ipAddress": text, "cliqueID": text},
    optional={"index": st.integers(-1, 17), "status": statuses},
)
_status_fields: dict[str, st.SearchStrategy[Any]] = {
    "nodes": st.lists(node_entries, max_size=3, unique_by=lambda n: n["name"]),
    "nodesReady": text,
}
v1_statuses = st.fixed_dictionaries({"status": statuses}, optional=_status_fields)


@st.composite
def v1beta1_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A v1beta1 ComputeDomain as served: numNodes is always there (its default)."""
    obj: dict[str, Any] = {"apiVersion": V1, "kind": "ComputeDomain", "metadata": draw(metadata())}
    if draw(st.booleans()):
        obj["spec"] = {"numNodes": draw(st.integers(0, 1 << 40)), "channel": draw(channels)}
    if draw(st.booleans()):
        obj["status"] = draw(v1_statuses)
    return obj


conditions = st.lists(
    st.fixed_dictionaries({
        "type": st.sampled_from(["Ready", "Formed", "Degraded"]),
        "status": st.sampled_from(["True", "False", "Unknown"]),
        "reason": names, "message": text, "lastTransitionTime": st.just("2025-01-01T00:00:00Z"),
    }),
    max_size=3,
    unique_by=lambda c: c["type"],
)  # fmt: skip


@st.composite
def v1beta2_objects(draw: st.DrawFn) -> dict[str, Any]:
    """A v1beta2 ComputeDomain, numNodes (when any) in its annotation, any placement."""
    obj: dict[str, Any] = {"apiVersion": V2, "kind": "ComputeDomain", "metadata": draw(metadata())}
    if draw(st.booleans()):
        obj["spec"] = {"channel": draw(channels)}
        cliques = [{"clique": c.value} for c in models.CliquePlacement]
        placement = draw(st.sampled_from([None, {}, *cliques]))
        if placement is not None:
            obj["spec"]["placement"] = placement
        count = draw(st.integers(0, 1 << 40))
        if count:
            obj["metadata"].setdefault("annotations", {})[NUM_NODES] = str(count)
    if draw(st.booleans()):
        status = draw(v1_statuses)
        if draw(st.booleans()):
            status["conditions"] = draw(conditions)
        obj["status"] = status
    return obj


@given(v1beta1_objects())
def test_v1beta1_round_trips_through_v1beta2(obj: dict[str, Any]) -> None:
    up = convert(obj, V2)
    assert up["apiVersion"] == V2
    if "spec" in up:
        assert "numNodes" not in up["spec"]
        models.ComputeDomainV1Beta2.from_dict(up, strict=True)  # valid at v1beta2
    assert convert(up, V1) == obj


@given(v1beta2_objects())
def test_v1beta2_round_trips_through_v1beta1_except_derived_status(obj: dict[str, Any]) -> None:
    down = convert(obj, V1)
    if "spec" in down:
        models.ComputeDomain.from_dict(down, strict=True)  # valid at v1beta1
    back = convert(down, V2)
    assert (back["metadata"], back.get("spec")) == (obj["metadata"], obj.get("spec"))
    if "status" in obj:
        # conditions and cliques are the controller's to derive again
        derived = {"conditions", "cliques"}
        assert back["status"] == {k: v for k, v in obj["status"].items() if k not in derived}


@given(v1beta2_objects())
def test_the_num_nodes_annotation_is_spec_num_nodes(obj: dict[str, Any]) -> None:
    parsed = models.ComputeDomainV1Beta2.from_dict(obj, strict=True)
    down = convert(obj, V1)
    if "spec" in down:
        assert down["spec"]["numNodes"] == parsed.num_nodes
        assert json.loads(down["metadata"].get("annotations", {}).get(PLACEMENT, "null")) == obj[
            "spec"
        ].get("placement")
