"""Verify's pure report (hooks/fabricreport.py): the fabric per rack and each check."""

from __future__ import annotations

from computedomains.fabric.model import Reason
from computedomains.hooks import fabricreport as fr
from computedomains.hooks.report import Severity

RACK = "5f0e3a4c-0000-4000-8000-000000000001"


def _healthy(name: str, clique: str) -> fr.NodeFabric:
    return fr.NodeFabric(name, f"{RACK}.{clique}", "True", Reason.HEALTHY.value, "ok", True)


def test_fabric_lines_per_rack_clique_and_node_state() -> None:
    nodes = [
        _healthy("n2", "1"),
        _healthy("n1", "1"),
        _healthy("n3", "2"),
        fr.NodeFabric("d", f"{RACK}.2", "True", Reason.DEGRADED.value, "2 links down", True),
        fr.NodeFabric(
            "b", "", "False", Reason.DRIVER_TOO_OLD.value, "driver 560 < 570.158.01", True
        ),
        fr.NodeFabric("plain", "", None, initialized=True),
        fr.NodeFabric("late", "", None),
    ]
    assert fr.fabric_lines(nodes) == [
        f"rack (NVLink cluster) {RACK}: 2 clique(s), 4 node(s)",
        f"  clique {RACK}.1: 2 node(s): n1, n2",
        f"  clique {RACK}.2: 2 node(s): d, n3",
        "broken: b: DriverTooOld: driver 560 < 570.158.01",
        "degraded: d: FabricDegraded: 2 links down",
        "no verdict yet: late (its kubelet plugin pod has not run node-init)",
        "no NVLink fabric: plain",
    ]
    assert fr.unjudged(nodes) == ["late"]


def test_missing_verdicts_fail_naming_the_nodes_and_broken_ones_do_not() -> None:
    f = fr.check_verdicts([fr.NodeFabric("late", "", None)], waited=300)
    assert f.severity is Severity.FAIL
    assert f.message == "no fabric verdict after 300s on 1 GPU node(s): late"
    assert "verify.timeoutSeconds" in f.fix
    broken = fr.NodeFabric("b", "", "False", "FabricRegistrationFailed", "x", True)
    ok = fr.check_verdicts([broken], waited=1)
    assert ok.severity is Severity.OK and "1 broken" in ok.message


def test_components_crds_classes_and_dry_run() -> None:
    (ready, behind) = fr.check_components(
        [fr.Component("DaemonSet", "p", 3, 3, 3), fr.Component("Deployment", "c", 2, 1, 2)]
    )
    assert ready.severity is Severity.OK
    assert (
        behind.severity is Severity.FAIL and behind.message == "Deployment c: 1/2 ready, 2 updated"
    )
    assert fr.check_components([])[0].severity is Severity.FAIL
    crds = fr.check_crds({"a": True, "b": False, "c": None})
    assert [f.severity for f in crds] == [Severity.OK, Severity.FAIL, Severity.FAIL]
    assert [crds[1].message, crds[2].message] == ["CRD b: not Established", "CRD c: missing"]
    assert fr.check_device_classes({"x": False})[0].message == "DeviceClass x: missing"
    refused = fr.check_dry_run("POST /apis/...: 500 conversion webhook unreachable")
    assert refused.severity is Severity.FAIL and "conversion webhook unreachable" in refused.message
    assert fr.check_dry_run("").severity is Severity.OK


def test_warn_policy_turns_failures_into_warnings() -> None:
    failing = [fr.check_dry_run("boom"), fr.check_dry_run("")]
    assert [f.severity for f in fr.apply_policy(failing, "Warn")] == [Severity.WARN, Severity.OK]
    assert fr.apply_policy(failing, "Fail") == failing
