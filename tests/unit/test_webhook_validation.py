"""ComputeDomain admission: one channel template per domain in a namespace."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains.api import constants, domainview
from computedomains.api.models import CliquePlacement
from computedomains.webhook import validation

NS = "team-a"


def _domain(
    name: str, template: str, *, namespace: str = NS, deleting: bool = False
) -> domainview.Domain:
    return domainview.Domain(
        namespace=namespace, name=name, uid=domainview.DomainUID(f"uid-{name}"), template=template,
        clique=CliquePlacement.NONE, deleting=deleting,
    )  # fmt: skip


def _object(
    name: str, template: str, version: str = constants.API_VERSION_V1BETA2
) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": template}}},
    }


def _create(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "r", "operation": "CREATE", "namespace": NS, "object": obj}


KNOWN = [_domain("first", "shared"), _domain("elsewhere", "other")]


@pytest.mark.parametrize("version", [constants.API_VERSION, constants.API_VERSION_V1BETA2])
def test_a_second_domain_naming_the_same_template_is_refused_naming_the_first(version: str) -> None:
    verdict = validation.validate(_create(_object("second", "shared", version)), KNOWN)
    assert not verdict.allowed
    assert "ComputeDomain team-a/second" in verdict.message
    assert "'shared' is already used by ComputeDomain 'first'" in verdict.message


def test_a_template_of_its_own_is_allowed() -> None:
    assert validation.validate(_create(_object("second", "mine")), KNOWN).allowed


def test_the_same_template_in_another_namespace_is_allowed() -> None:
    known = [_domain("first", "shared", namespace="team-b")]
    assert validation.validate(_create(_object("second", "shared")), known).allowed


def test_a_domain_does_not_clash_with_itself() -> None:
    request = _create(_object("first", "shared")) | {"operation": "UPDATE"}
    assert validation.validate(request, KNOWN).allowed


def test_an_update_that_keeps_an_existing_clash_is_allowed() -> None:
    request = {
        "uid": "r", "operation": "UPDATE", "namespace": NS,
        "object": _object("second", "shared"), "oldObject": _object("second", "shared"),
    }  # fmt: skip
    assert validation.validate(request, KNOWN).allowed


def test_an_update_that_renames_into_a_clash_is_refused() -> None:
    request = {
        "uid": "r", "operation": "UPDATE", "namespace": NS,
        "object": _object("second", "shared"), "oldObject": _object("second", "mine"),
    }  # fmt: skip
    assert not validation.validate(request, KNOWN).allowed


def test_a_domain_being_deleted_still_holds_its_template() -> None:
    verdict = validation.validate(
        _create(_object("second", "gone")), [_domain("old", "gone", deleting=True)]
    )
    assert not verdict.allowed and "being deleted" in verdict.message


def test_generate_name_is_shown_when_there_is_no_name_yet() -> None:
    obj = _object("", "shared")
    obj["metadata"] = {"generateName": "job-", "namespace": NS}
    verdict = validation.validate(_create(obj), KNOWN)
    assert not verdict.allowed and "team-a/job-*" in verdict.message


def test_domain_view_reads_both_versions() -> None:
    v1 = domainview.Domain.peek(_object("a", "t", constants.API_VERSION) | {})
    assert (v1.name, v1.template, v1.clique) == ("a", "t", CliquePlacement.NONE)
    v2 = _object("a", "t")
    v2["spec"]["placement"] = {"clique": "Required"}
    v2["metadata"]["uid"] = "u"
    assert domainview.Domain.peek(v2).clique is CliquePlacement.REQUIRED


@pytest.mark.parametrize(
    ("version", "annotation", "value", "field"),
    [
        (constants.API_VERSION_V1BETA2, constants.NUM_NODES_ANNOTATION, "9" * 19, "num-nodes"),
        (constants.API_VERSION_V1BETA2, constants.NUM_NODES_ANNOTATION, "-1", "num-nodes"),
        (constants.API_VERSION, constants.PLACEMENT_ANNOTATION, "{", "placement"),
        (constants.API_VERSION, constants.PLACEMENT_ANNOTATION, '{"clique":"x"}', "clique"),
    ],
)
def test_a_reserved_annotation_the_other_version_cannot_read_is_refused_naming_it(
    version: str, annotation: str, value: str, field: str
) -> None:
    obj = _object("odd", "own", version)
    obj["metadata"]["annotations"] = {annotation: value}
    verdict = validation.validate(_create(obj), KNOWN)
    assert not verdict.allowed
    assert verdict.message.startswith("ComputeDomain team-a/odd: metadata.annotations[")
    assert field in verdict.message
    assert "reserved for conversion" in verdict.message


@pytest.mark.parametrize(
    ("version", "annotation", "value"),
    [
        (constants.API_VERSION_V1BETA2, constants.NUM_NODES_ANNOTATION, "4"),
        (constants.API_VERSION, constants.PLACEMENT_ANNOTATION, '{"clique":"Required"}'),
        # Read at the other version, each is dropped or rewritten from the spec: harmless.
        (constants.API_VERSION, constants.NUM_NODES_ANNOTATION, "not a number"),
        (constants.API_VERSION_V1BETA2, constants.PLACEMENT_ANNOTATION, "{"),
    ],
)
def test_reserved_annotations_the_other_version_reads_are_allowed(
    version: str, annotation: str, value: str
) -> None:
    obj = _object("fine", "own", version)
    obj["metadata"]["annotations"] = {annotation: value}
    assert validation.validate(_create(obj), KNOWN).allowed
