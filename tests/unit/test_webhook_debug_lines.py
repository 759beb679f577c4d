"""At ``-v 1`` the webhook logs each admission decision with the domains it was made from."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from computedomains.api import constants, domainview
from computedomains.api.models import CliquePlacement
from computedomains.webhook import service

NS = "team-a"
KNOWN = [
    domainview.Domain(
        namespace=NS, name="cd", uid=domainview.DomainUID("uid-1"), template="cd-channel",
        clique=CliquePlacement.REQUIRED,
    ),
]  # fmt: skip


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "r", "operation": "CREATE", "namespace": NS, "object": obj}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _pod(template: str) -> dict[str, Any]:
    claims = [{"name": "ch", "resourceClaimTemplateName": template}]
    return {"metadata": {"generateName": "worker-"}, "spec": {"resourceClaims": claims}}


def _domain(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION_V1BETA2,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": template}}},
    }


def _decide(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    routes = service.routes(lambda: KNOWN, spread=True)
    with caplog.at_level(level, logger="computedomains"):
        for path, obj in [
            ("/mutate/pods", _pod("cd-channel")),
            ("/mutate/pods", _pod("unknown")),
            ("/validate/computedomains", _domain("second", "cd-channel")),
            ("/validate/computedomains", _domain("third", "own")),
        ]:
            routes[path](_review(obj))
    return [r.getMessage() for r in caplog.records if r.name == service.__name__]


def test_placement_and_validation_decisions_name_their_inputs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    placed, unplaced, denied, accepted = _decide(caplog, logging.DEBUG)
    assert placed == (
        "pod team-a/worker-*: affinity injected (2 term(s)), label set; claims cd-channel; "
        "domains team-a/cd (uid-1, clique Required); spread on"
    )
    assert unplaced == (
        "pod team-a/worker-*: no affinity injected, label kept; claims unknown; domains none; "
        "spread on"
    )
    assert denied.startswith(
        "CREATE of ComputeDomain team-a/second (template 'cd-channel', before ''): deny ("
    )
    assert "already used by ComputeDomain 'cd'" in denied
    assert denied.endswith("; 1 ComputeDomain(s) known")
    assert accepted == (
        "CREATE of ComputeDomain team-a/third (template 'own', before ''): accept; "
        "1 ComputeDomain(s) known"
    )

    caplog.clear()
    assert _decide(caplog, logging.INFO) == []
