"""The controller's first look at a channel claim: what can never be prepared is said at once."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains.api import constants
from computedomains.controller import claimcheck

DOMAINS = {"uid-a": "team-a", "uid-b": "team-b"}


def _claim(parameters: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    config = []
    if parameters is not None:
        opaque = {"driver": constants.DRIVER_NAME, "parameters": parameters}
        config = [{"requests": ["channel"], "opaque": opaque}]
    request = {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}
    return {
        "metadata": {"name": "c", "namespace": "team-a", "uid": "c1", **extra},
        "spec": {"devices": {"requests": [request], "config": config}},
    }


def _channel(domain: str = "uid-a", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.CHANNEL_CONFIG_KIND,
            "domainID": domain, **extra}  # fmt: skip


def _check(claim: dict[str, Any]) -> claimcheck.Problem | None:
    return claimcheck.check(claim, namespace_of=DOMAINS.get)


@pytest.mark.parametrize(
    ("parameters", "reason", "named"),
    [
        (None, "MissingChannelConfig", "ComputeDomainChannelConfig"),
        (_channel(allocatonMode="All"), "InvalidConfig", "allocatonMode"),
        (_channel(domain=""), "InvalidConfig", "domainID"),
        (_channel(domain="uid-b"), "ComputeDomainNotFound", "namespace team-a"),
        (_channel(domain="uid-z"), "ComputeDomainNotFound", "namespace team-a"),
    ],
)
def test_a_claim_that_can_never_be_prepared_is_told_why(
    parameters: dict[str, Any] | None, reason: str, named: str
) -> None:
    claim = _claim(parameters)
    if parameters is None:  # judged once allocated: the allocation could have brought one
        assert _check(claim) is None
        claim["status"] = {"allocation": {"devices": {"results": []}}}
    problem = _check(claim)
    assert problem is not None
    assert problem.reason == reason and named in problem.message
    assert "team-b" not in problem.message  # another tenant's domain is never named


def test_a_good_claim_and_claims_of_other_drivers_are_left_alone() -> None:
    assert _check(_claim(_channel())) is None
    other = _claim(None)
    other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.example.com"
    assert _check(other) is None


def test_the_claim_its_pod_and_the_pods_it_is_reserved_for_are_told() -> None:
    claim = _claim(None, ownerReferences=[{"kind": "Pod", "name": "p", "uid": "p1"}])
    claim["status"] = {"reservedFor": [{"resource": "pods", "name": "q", "uid": "q1"}]}
    told = [(r.kind, r.name, r.uid) for r in claimcheck.audience(claim)]
    assert told == [("ResourceClaim", "c", "c1"), ("Pod", "p", "p1"), ("Pod", "q", "q1")]


def test_a_config_in_the_allocation_alone_is_the_claims_config() -> None:
    """As placement reads it (``placement.opaque_configs``): the allocation's copy counts."""
    claim = _claim(None)
    opaque = {"driver": constants.DRIVER_NAME, "parameters": _channel()}
    claim["status"] = {"allocation": {"devices": {"config": [{"opaque": opaque}]}}}
    assert _check(claim) is None
