"""ConversionReview and AdmissionReview v1: requests parsed, responses built (pure).

The HTTPS server hands each request body here together with the function that does the work
(the conversion, a validation, a mutation), so these wrappers know the wire formats and
nothing about ComputeDomains.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from typing import Any

CONVERSION_API_VERSION = "apiextensions.k8s.io/v1"
ADMISSION_API_VERSION = "admission.k8s.io/v1"

Convert = Callable[[Mapping[str, Any], str], dict[str, Any]]
"""``computedomains.api.conversion.convert``: (object, desired apiVersion) → object."""


class BadReview(ValueError):
    """The body is not a review of the expected kind (answered with HTTP 400)."""


class NotReady(RuntimeError):
    """The webhook cannot decide yet (answered with HTTP 503).

    The API server then applies the webhook configuration's ``failurePolicy``: a validation
    that must not be skipped refuses the request, a placement that may be skipped lets it pass.
    """


class Outcome(enum.StrEnum):
    """How a review ended, for metrics."""

    OK = "ok"
    """Converted, allowed or mutated."""
    REJECTED = "rejected"
    """A conversion answered Failed, an admission denied."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """A review's response body and how it ended."""

    body: dict[str, Any]
    outcome: Outcome


def _request(review: Any, *, api_version: str, kind: str) -> dict[str, Any]:
    if not isinstance(review, dict) or review.get("kind") != kind:
        raise BadReview(f"expected a {kind}")
    if review.get("apiVersion") != api_version:
        raise BadReview(f"expected {kind} {api_version}, got {review.get('apiVersion')!r}")
    request = review.get("request")
    if not isinstance(request, dict) or not request.get("uid"):
        raise BadReview(f"{kind} without a request uid")
    return request


# -- conversion -------------------------------------------------------------------------------


def conversion(review: Any, convert: Convert, *, errors: tuple[type[Exception], ...]) -> Answer:
    """The ConversionReview response: every object converted, or Failed with the first error.

    ``errors`` are the exceptions that mean "this object cannot be converted" (their message
    is the answer); anything else is a bug and propagates.
    """
    request = _request(review, api_version=CONVERSION_API_VERSION, kind="ConversionReview")
    desired = request.get("desiredAPIVersion")
    objects = request.get("objects")
    if not isinstance(desired, str) or not isinstance(objects, list):
        raise BadReview("ConversionReview request without desiredAPIVersion or objects")
    response: dict[str, Any] = {"uid": request["uid"]}
    outcome = Outcome.OK
    try:
        response["convertedObjects"] = [convert(obj, desired) for obj in objects]
        response["result"] = {"status": "Success"}
    except errors as exc:
        response["convertedObjects"] = []
        response["result"] = {"status": "Failed", "message": str(exc)}
        outcome = Outcome.REJECTED
    body = {"apiVersion": CONVERSION_API_VERSION, "kind": "ConversionReview", "response": response}
    return Answer(body, outcome)


# -- admission --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What an admission decision says about one request."""

    allowed: bool = True
    message: str = ""
    """Why it was denied (shown to the user as is)."""
    patch: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """JSONPatch operations (mutation only)."""
    warnings: tuple[str, ...] = ()


Decide = Callable[[dict[str, Any]], Verdict]
"""Given the AdmissionReview request, the verdict."""


def admission(review: Any, decide: Decide) -> Answer:
    """The AdmissionReview response for ``decide``'s verdict on the request."""
    request = _request(review, api_version=ADMISSION_API_VERSION, kind="AdmissionReview")
    verdict = decide(request)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.message}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch).encode()).decode()
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    body = {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
    return Answer(body, Outcome.OK if verdict.allowed else Outcome.REJECTED)
