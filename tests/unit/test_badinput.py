"""The generated bad input of tests/support/badinput.py, and its classifier of answers.

The strategies must make valid objects that the project's models accept, change exactly the
field they record, and name it the way the API server would; the classifier must tell a
refusal that names the field from one that does not, on Status bodies as the API server writes
them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computedomains.api import claimrefusals, constants, conversion, models
from computedomains.api.schema import ValidationError
from tests.support import badinput
from tests.support.badinput import Entry, Example, Outcome

V1, V2 = badinput.V1, badinput.V2
CLIQUE = "6c2f3a4e-1d2b-5c3d-9e4f-0a1b2c3d4e5f.1"
NODES = ("gb200-r0-n04", "gb200-r1-n99", "node-x")
UID = "11111111-2222-3333-4444-555555555555"
SOME = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- paths ------------------------------------------------------------------------------------


def test_paths_render_as_the_api_server_writes_them() -> None:
    at = (*badinput.PARAMETERS_AT, "domainID")
    assert badinput.render(at) == "spec.devices.config[0].opaque.parameters.domainID"
    key = Entry(constants.NUM_NODES_ANNOTATION)
    assert badinput.render(("metadata", "annotations", key)) == (
        "metadata.annotations[computedomains.io/num-nodes]"
    )
    assert badinput.render(("daemons", 1, "nodeName")) == "daemons[1].nodeName"


def test_put_sets_removes_and_makes_the_way() -> None:
    obj = {"spec": {"a": 1, "list": [{"x": 1}]}}
    assert badinput.put(obj, ("spec", "a"), 2) == {"spec": {"a": 2, "list": [{"x": 1}]}}
    assert badinput.put(obj, ("spec", "a"), badinput.REMOVE) == {"spec": {"list": [{"x": 1}]}}
    assert badinput.put(obj, ("spec", "list", 0, "x"), None)["spec"]["list"] == [{"x": None}]
    made = badinput.put(obj, ("metadata", "annotations", Entry("k")), "v")
    assert made["metadata"] == {"annotations": {"k": "v"}}
    assert obj == {"spec": {"a": 1, "list": [{"x": 1}]}}  # never changed in place
    assert badinput.without(obj, ("spec", "a")) == {"spec": {"list": [{"x": 1}]}}
    assert badinput.without(obj, ("nowhere", "x")) == obj


# -- the classifier ---------------------------------------------------------------------------


def status(message: str, *causes: tuple[str, str], code: int = 422) -> dict[str, Any]:
    """A Status as the API server writes one."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": message, "code": code}  # fmt: skip
    if causes:
        body["details"] = {"causes": [{"field": f, "message": m} for f, m in causes]}
    return body


def at(*path: str | int, also: tuple[str, ...] = ()) -> Example:
    """An example that changed the field at ``path``."""
    return Example({}, {}, tuple(path), "test", also)


ALLOCATION = ("spec", "channel", "allocationMode")
INVALID = status(
    'ComputeDomain.resource.nvidia.com "gen" is invalid: spec.channel.allocationMode: '
    'Unsupported value: "Many": supported values: "All", "Single"',
    ("spec.channel.allocationMode", 'Unsupported value: "Many"'),
)


def test_a_refusal_naming_the_field_or_a_field_inside_it_names_it() -> None:
    assert badinput.classify(at(*ALLOCATION), 422, INVALID) is Outcome.NAMED
    required = status('ComputeDomain.resource.nvidia.com "gen" is invalid: '
                      "spec.channel.resourceClaimTemplate.name: Required value")  # fmt: skip
    assert badinput.classify(at("spec", "channel"), 422, required) is Outcome.NAMED
    strict = status(
        'ComputeDomain in version "v1beta2" cannot be handled as a ComputeDomain: strict '
        'decoding error: unknown field "spec.channel.allocatonMode"', code=400,
    )  # fmt: skip
    assert badinput.classify(at("spec", "channel", "allocatonMode"), 400, strict) is Outcome.NAMED
    listed = status("is invalid", ("daemons[1]", "Duplicate value: ..."))
    assert badinput.classify(at("daemons"), 422, listed) is Outcome.NAMED


def test_a_refusal_naming_another_field_or_none_does_not_name_it() -> None:
    assert badinput.classify(at("spec", "placement", "clique"), 422, INVALID) is Outcome.UNNAMED
    assert badinput.classify(at(*ALLOCATION), 400, status("bad request")) is Outcome.UNNAMED
    # A field outside the one named is not named: spec.channel is not spec.channel.allocationMode.
    outer = status("spec.channel: Required value")
    assert badinput.classify(at(*ALLOCATION), 422, outer) is Outcome.UNNAMED
    # A valid example names nothing, so any refusal of it is a failure.
    assert badinput.classify(Example({}, {}), 422, INVALID) is Outcome.UNNAMED


def test_webhook_and_policy_denials_name_the_field_in_their_message() -> None:
    webhook = status(
        "admission webhook \"validate.computedomains.resource.nvidia.com\" denied the request: "
        "ComputeDomain ns/b: spec.channel.resourceClaimTemplate.name 'a-channel' is already "
        "used by ComputeDomain 'a' in this namespace", code=403,
    )  # fmt: skip
    assert badinput.classify(at(*badinput.TEMPLATE_AT), 403, webhook) is Outcome.NAMED
    policy = status(
        "pods \"gen\" is forbidden: ValidatingAdmissionPolicy 'cd-pod-domain-label' denied "
        "request: the label computedomains.io/domain is set by the compute-domains webhook "
        "alone", code=403,
    )  # fmt: skip
    label = at("metadata", "labels", Entry(badinput.DOMAIN_LABEL),
               also=("metadata.labels", badinput.DOMAIN_LABEL))  # fmt: skip
    assert badinput.classify(label, 403, policy) is Outcome.NAMED


def test_acceptance_errors_and_odd_bodies() -> None:
    assert badinput.classify(at(*ALLOCATION), 201, {}) is Outcome.ACCEPTED
    failed = status("conversion webhook failed: spec.channel.allocationMode: ...", code=500)
    assert badinput.classify(at(*ALLOCATION), 500, failed) is Outcome.ERROR
    assert badinput.classify(at(*ALLOCATION), 0, {}) is Outcome.ERROR
    odd = {"message": None, "details": {"causes": [None, {"field": None}, "x"]}}
    assert badinput.classify(at(*ALLOCATION), 422, odd) is Outcome.UNNAMED
    assert badinput.texts({"details": "not an object"}) == [""]


def test_the_tally_counts_and_keeps_the_failures() -> None:
    tally = badinput.Tally("things")
    tally.record(at(*ALLOCATION), 201, {})
    tally.record(at(*ALLOCATION), 422, INVALID)
    tally.record(at("spec", "placement"), 422, INVALID)
    tally.record(at(*ALLOCATION), 500, status("boom", code=500))
    tally.fail(at(*ALLOCATION), "the model cannot read it")
    assert tally.examples == 4
    assert tally.summary() == (
        "things: 4 examples, 1 accepted (1 not working), 1 refused naming the field, "
        "1 refused without naming it, 1 errors"
    )
    assert len(tally.failures) == 3
    assert tally.failures[0].startswith("refused without naming the field (422): test at spec.")
    assert "more" in badinput.Tally("x", failures=["f"] * 30).report(limit=5)


# -- the strategies ---------------------------------------------------------------------------


def only_the_field_changed(example: Example) -> None:
    """A valid example is its base; any other changed its base at ``at`` and nowhere else."""
    if not example.at:
        assert example.body == example.base
        return
    assert tidy(badinput.without(example.body, example.at)) == tidy(
        badinput.without(example.base, example.at)
    )


def tidy(obj: Any) -> Any:
    """``obj`` without an empty ``metadata.annotations`` or ``labels`` (a map an example made)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    for key in ("annotations", "labels"):
        if isinstance(meta, dict) and meta.get(key) == {}:
            del meta[key]
    return obj


def named_by(example: Example, field: str) -> bool:
    """Whether a refusal naming ``field`` names the example's field."""
    return badinput.names_field({"message": field}, example.names)


@pytest.mark.parametrize("version", [V1, V2])
@SOME
@given(data=st.data())
def test_domains_change_one_recorded_field_of_a_valid_domain(version: str, data: Any) -> None:
    example = data.draw(badinput.compute_domains(version))
    model = badinput.domain_model(version)
    model.from_dict(example.base, strict=True)  # the base is valid
    assert badinput.domain_works(example.base) is None
    only_the_field_changed(example)
    if not example.at:
        return
    assert example.field
    try:
        model.from_dict(example.body, strict=True)
    except ValidationError as exc:  # the model (the CRD's source) names the same field
        assert named_by(example, exc.field), (exc, example.describe())


@SOME
@given(badinput.compute_domains(V1))
def test_conversion_answers_every_v1beta1_domain_the_schema_admits(example: Example) -> None:
    """What the API server hands the conversion webhook converts, or fails naming the field."""
    try:
        models.ComputeDomain.from_dict(example.body, strict=True)
    except ValidationError:
        return  # the API server refuses it before conversion
    try:
        conversion.convert(example.body, V2)
    except conversion.ConversionError as exc:
        assert named_by(example, exc.field), (exc, example.describe())


@SOME
@given(badinput.template_names("taken-channel"))
def test_template_names_change_only_the_name(example: Example) -> None:
    assert example.field == "spec.channel.resourceClaimTemplate.name"
    only_the_field_changed(example)
    name = example.body["spec"]["channel"]["resourceClaimTemplate"]["name"]
    try:
        models.ComputeDomainV1Beta2.from_dict(example.body, strict=True)
    except ValidationError as exc:
        assert not badinput.is_object_name(name)
        assert exc.field == example.field
    else:
        assert badinput.is_object_name(name)


@SOME
@given(badinput.dns_names())
def test_valid_names_are_object_names(name: str) -> None:
    assert badinput.is_object_name(name)


def test_object_names() -> None:
    assert badinput.is_object_name("a" * 253)
    assert not badinput.is_object_name("a" * 254)
    assert not badinput.is_object_name("Channel")
    assert not badinput.is_object_name(7)


def parameters_of(body: dict[str, Any]) -> Any:
    return body["spec"]["devices"]["config"][0]["opaque"]["parameters"]


@SOME
@given(badinput.channel_claims((UID,)))
def test_claims_change_one_recorded_field_of_a_valid_config(example: Example) -> None:
    models.parse_opaque_config(parameters_of(example.base))
    only_the_field_changed(example)
    if example.at:
        assert example.field.startswith(badinput.render(badinput.PARAMETERS_AT))
    field = badinput.model_field(parameters_of(example.body))
    if field is None:
        return
    prefix = badinput.render(badinput.PARAMETERS_AT)
    full = f"{prefix}.{field}" if field else prefix
    # Changing the kind makes the other kind's strict parse name a field the first kind has.
    kind_changed = example.field.endswith((".kind", ".apiVersion"))
    assert named_by(example, full) or kind_changed, (field, example.describe())
    problem = badinput.claim_problem(example.body, "ns")
    assert problem is not None and problem.reason == claimrefusals.INVALID_CONFIG
    assert field in problem.message


def test_the_controller_tells_each_claim_what_it_will_say() -> None:
    channel = {"apiVersion": V1, "kind": constants.CHANNEL_CONFIG_KIND, "domainID": UID}
    problem = badinput.claim_problem(badinput.claim(channel), "ns")
    assert problem is not None and problem.reason == claimrefusals.DOMAIN_NOT_FOUND
    daemon = {"apiVersion": V1, "kind": constants.DAEMON_CONFIG_KIND, "domainID": UID}
    assert badinput.claim_problem(badinput.claim(daemon), "ns") is None
    typo = badinput.claim_problem(badinput.claim({**channel, "allocatonMode": "All"}), "ns")
    assert typo is not None and typo.reason == claimrefusals.INVALID_CONFIG
    assert "allocatonMode" in typo.message
    assert badinput.model_field([]) == ""


def test_a_huge_config_may_be_refused_as_a_whole() -> None:
    """The API server takes 10 KiB of parameters: a refusal naming them names the change."""

    @SOME
    @given(badinput.channel_claims((UID,)))
    def check(example: Example) -> None:
        if len(json.dumps(parameters_of(example.body))) > badinput.PARAMETERS_LIMIT:
            assert named_by(example, badinput.render(badinput.PARAMETERS_AT))

    check()


@SOME
@given(badinput.cliques(CLIQUE, NODES, {"mark": "yes"}))
def test_cliques_change_one_recorded_field_of_a_valid_clique(example: Example) -> None:
    base = models.ComputeDomainCliqueV1Beta2.from_dict(example.base, strict=True)
    assert {d.node_name for d in base.daemons} <= set(NODES)
    assert models.clique_members(example.base) is not None
    labels = example.base["metadata"]["labels"]
    assert labels["mark"] == "yes" and labels[constants.CLIQUE_ID_LABEL] == CLIQUE
    uid = labels[constants.COMPUTE_DOMAIN_LABEL]
    assert example.base["metadata"]["name"] == models.clique_name(uid, CLIQUE)
    only_the_field_changed(example)
    try:
        models.ComputeDomainCliqueV1Beta2.from_dict(example.body, strict=True)
    except ValidationError as exc:
        assert named_by(example, exc.field), (exc, example.describe())


def test_a_clique_is_made_again_for_another_domain() -> None:
    base = {"apiVersion": V2, "kind": constants.CLIQUE_KIND,
            "metadata": {"name": f"old.{CLIQUE}", "labels": {constants.COMPUTE_DOMAIN_LABEL: "old",
                                                            "mark": "yes"}}}  # fmt: skip
    again = badinput.for_domain(base, UID)
    labels = {constants.COMPUTE_DOMAIN_LABEL: UID, "mark": "yes"}
    assert again["metadata"] == {"name": f"{UID}.{CLIQUE}", "labels": labels}
    forged = badinput.put(base, ("metadata", "labels", Entry(constants.COMPUTE_DOMAIN_LABEL)), "A")
    assert (
        badinput.for_domain(forged, UID)["metadata"]["labels"][constants.COMPUTE_DOMAIN_LABEL]
        == "A"
    )
    assert base["metadata"]["name"] == f"old.{CLIQUE}"


@SOME
@given(badinput.pods("cd-channel", UID))
def test_pods_carry_a_label_written_by_hand_or_none(example: Example) -> None:
    assert "labels" not in example.base["metadata"]
    only_the_field_changed(example)
    if example.at:
        assert example.at[:2] == ("metadata", "labels")
        named = (example.field, "metadata.labels", example.at[2])
        decoded = () if isinstance(example.value, str) else ("ObjectMeta.labels",)
        assert example.names == named + decoded
    claimed = {c["name"] for c in example.body["spec"].get("resourceClaims", [])}
    used = {c["name"] for c in example.body["spec"]["containers"][0].get("resources", {})
            .get("claims", [])}  # fmt: skip
    assert claimed == used


def test_a_label_or_annotation_that_is_no_string_may_be_named_as_the_decoder_does() -> None:
    base = {"metadata": {"name": "x"}}
    at = ("metadata", "annotations", badinput.Entry("k"))
    assert "ObjectMeta.annotations" in badinput.change(base, at, "annotation", 1).names
    assert "ObjectMeta.annotations" not in badinput.change(base, at, "annotation", "1").names


def test_a_pod_works_when_it_carries_the_label_exactly_when_it_claims_the_template() -> None:
    claiming = {"spec": {"resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}}
    labelled = {"metadata": {"labels": {badinput.DOMAIN_LABEL: UID}}}
    assert badinput.pod_works(claiming, labelled, "t", UID) is None
    assert badinput.pod_works(claiming, {}, "t", UID) is not None
    assert badinput.pod_works({"spec": {}}, {}, "t", UID) is None
    forged = badinput.pod_works({"spec": {}}, labelled, "t", UID)
    assert forged is not None and "expected None" in forged


def test_a_domain_works_when_both_versions_can_read_it() -> None:
    channel = {"resourceClaimTemplate": {"name": "a-channel"}, "allocationMode": "Single"}
    v2 = {"apiVersion": V2, "kind": "ComputeDomain", "metadata": {"name": "a"},
          "spec": {"channel": channel}}  # fmt: skip
    assert badinput.domain_works(v2) is None
    counted = badinput.put(v2, ("metadata", "annotations", Entry(constants.NUM_NODES_ANNOTATION)),
                           "4")  # fmt: skip
    assert badinput.domain_works(counted) is None
    unreadable = badinput.put(counted, ("metadata", "annotations",
                                        Entry(constants.NUM_NODES_ANNOTATION)), "four")  # fmt: skip
    why = badinput.domain_works(unreadable)
    assert why is not None and constants.NUM_NODES_ANNOTATION in why
    v1 = {**v2, "apiVersion": V1, "spec": {"channel": channel, "numNodes": 2}}
    assert badinput.domain_works(v1) is None
    assert badinput.domain_works({**v2, "apiVersion": "v1"}) is not None
    bad_mode = badinput.put(v2, ("spec", "channel", "allocationMode"), "Many")
    why = badinput.domain_works(bad_mode)
    assert why is not None and "spec.channel.allocationMode" in why
