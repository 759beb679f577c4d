"""Preflight's CRD version checks (hooks/crdversions.py)."""

from __future__ import annotations

from computedomains.hooks import crdversions as cv
from computedomains.hooks.report import Severity

CD = "computedomains.resource.nvidia.com"
WHERE = {"release": "cd", "namespace": "ns"}


def test_a_stored_version_this_chart_does_not_serve_is_refused_with_the_way_back() -> None:
    future = cv.LiveCRD(CD, ("v1beta1", "v1beta2", "v1beta3"), ("v1beta2", "v1beta3"))
    (finding,) = cv.check_stored([future], **WHERE)
    assert finding.severity is Severity.FAIL
    assert "stored at v1beta3" in finding.message and "(v1beta1, v1beta2)" in finding.message
    assert "--set crds.storageVersion=<one of v1beta1, v1beta2>" in finding.fix
    assert "helm rollback cd <revision> -n ns" in finding.fix
    (fine,) = cv.check_stored([cv.LiveCRD(CD, ("v1beta1",), ("v1beta1",))], **WHERE)
    assert fine.severity is Severity.OK


def test_an_upgrade_that_would_make_rollback_impossible_is_refused_unless_allowed() -> None:
    old = cv.LiveCRD(CD, ("v1beta1",), ("v1beta1",))
    (refused,) = cv.check_one_way([old], storage="v1beta2", upgrade=True, allowed=False, **WHERE)
    assert refused.severity is Severity.FAIL
    assert "neither helm rollback nor --atomic could go back" in refused.message
    assert "--set crds.storageVersion=v1beta1" in refused.fix
    assert "preflight.allowOneWayUpgrade=true" in refused.fix
    (warned,) = cv.check_one_way([old], storage="v1beta2", upgrade=True, allowed=True, **WHERE)
    assert warned.severity is Severity.WARN
    assert cv.check_one_way([old], storage="v1beta1", upgrade=True, allowed=False, **WHERE) == []
    assert cv.check_one_way([old], storage="v1beta2", upgrade=False, allowed=False, **WHERE) == []
    both = cv.LiveCRD(CD, ("v1beta1", "v1beta2"), ("v1beta1",))
    assert cv.check_one_way([both], storage="v1beta2", upgrade=True, allowed=False, **WHERE) == []
