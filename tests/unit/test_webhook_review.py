"""ConversionReview and AdmissionReview wrappers, with a stand-in conversion and decisions."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from computedomains.api import constants
from computedomains.webhook import review, service

CONVERSION = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "ConversionReview",
    "request": {
        "uid": "u-1",
        "desiredAPIVersion": "example.com/v2",
        "objects": [{"apiVersion": "example.com/v1", "metadata": {"name": "a"}}],
    },
}


class Unconvertible(ValueError):
    pass


def _convert(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    if obj.get("metadata", {}).get("name") == "bad":
        raise Unconvertible("metadata.annotations[x]: not a number")
    return {**obj, "apiVersion": api_version}


def test_every_object_is_converted_and_the_uid_echoed() -> None:
    answer = review.conversion(CONVERSION, _convert, errors=(Unconvertible,))
    assert answer.outcome is review.Outcome.OK
    assert answer.body == {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": "u-1",
            "convertedObjects": [{"apiVersion": "example.com/v2", "metadata": {"name": "a"}}],
            "result": {"status": "Success"},
        },
    }


def test_an_unconvertible_object_fails_the_review_with_its_message() -> None:
    body = json.loads(json.dumps(CONVERSION))
    body["request"]["objects"].append({"apiVersion": "example.com/v1", "metadata": {"name": "bad"}})
    answer = review.conversion(body, _convert, errors=(Unconvertible,))
    assert answer.outcome is review.Outcome.REJECTED
    assert answer.body["response"]["result"] == {
        "status": "Failed",
        "message": "metadata.annotations[x]: not a number",
    }
    assert answer.body["response"]["convertedObjects"] == []


def test_a_bug_in_the_conversion_is_not_reported_as_a_failed_object() -> None:
    def broken(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
        raise KeyError("spec")

    with pytest.raises(KeyError):
        review.conversion(CONVERSION, broken, errors=(Unconvertible,))


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": "x"}},
        {"kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1beta1",
         "request": {"uid": "x"}},
        {"kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1", "request": {}},
        {"kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1",
         "request": {"uid": "x", "objects": []}},
    ],
)  # fmt: skip
def test_what_is_not_a_conversion_review_v1_is_a_bad_review(body: Any) -> None:
    with pytest.raises(review.BadReview):
        review.conversion(body, _convert, errors=(Unconvertible,))


ADMISSION = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {"uid": "a-1", "operation": "CREATE", "object": {"metadata": {"name": "p"}}},
}


def test_an_allowed_request_answers_allowed_with_the_uid() -> None:
    answer = review.admission(ADMISSION, lambda request: review.Verdict())
    assert answer.outcome is review.Outcome.OK
    assert answer.body["response"] == {"uid": "a-1", "allowed": True}


def test_a_denied_request_carries_the_message_as_a_403_status() -> None:
    answer = review.admission(ADMISSION, lambda r: review.Verdict(allowed=False, message="no"))
    assert answer.outcome is review.Outcome.REJECTED
    assert answer.body["response"] == {
        "uid": "a-1",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "no"},
    }


def test_a_mutation_is_a_base64_json_patch_with_warnings() -> None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    answer = review.admission(ADMISSION, lambda r: review.Verdict(patch=ops, warnings=("w",)))
    response = answer.body["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops
    assert response["warnings"] == ["w"]


def test_the_decision_sees_the_request() -> None:
    seen: list[dict[str, Any]] = []

    def decide(request: dict[str, Any]) -> review.Verdict:
        seen.append(request)
        return review.Verdict()

    review.admission(ADMISSION, decide)
    assert seen == [ADMISSION["request"]]


def test_before_the_cache_syncs_conversion_answers_and_admission_says_not_ready() -> None:
    def not_synced() -> list[Any]:
        raise review.NotReady("the webhook's ComputeDomain cache has not synced yet")

    routes = service.routes(not_synced)
    v1beta1 = {
        "apiVersion": constants.API_VERSION, "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "cd", "namespace": "ns"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "t"}}},
    }  # fmt: skip
    request = {"uid": "u-2", "desiredAPIVersion": constants.API_VERSION_V1BETA2}
    converting = {**CONVERSION, "request": {**request, "objects": [v1beta1]}}
    answer = routes[constants.CONVERSION_PATH](converting)
    assert answer.outcome is review.Outcome.OK
    (converted,) = answer.body["response"]["convertedObjects"]
    assert converted["apiVersion"] == constants.API_VERSION_V1BETA2
    admission = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-3", "operation": "CREATE", "object": v1beta1,
                    "namespace": "ns", "kind": {"kind": constants.COMPUTE_DOMAIN_KIND}},
    }  # fmt: skip
    for path in ("/validate/computedomains", "/mutate/pods"):
        with pytest.raises(review.NotReady, match="not synced"):
            routes[path](admission)
