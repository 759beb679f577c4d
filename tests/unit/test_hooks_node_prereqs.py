"""Preflight's node prerequisites: Pod Security of the namespace, CDI in the runtime, the driver."""

from __future__ import annotations

import pytest

from computedomains.hooks import nodeprereqs as np
from computedomains.hooks.report import Severity


@pytest.mark.parametrize(
    ("labels", "severity"),
    [
        ({np.POD_SECURITY_ENFORCE: "privileged"}, Severity.OK),
        ({}, Severity.INFO),
        ({np.POD_SECURITY_ENFORCE: "baseline"}, Severity.FAIL),
        ({np.POD_SECURITY_ENFORCE: "restricted"}, Severity.FAIL),
    ],
)
def test_the_namespace_must_admit_privileged_pods(
    labels: dict[str, str], severity: Severity
) -> None:
    finding = np.check_pod_security("gpu", labels)
    assert finding.severity is severity
    if severity is not Severity.OK:
        assert "kubectl label namespace gpu pod-security.kubernetes.io/enforce=privileged" in (
            finding.fix
        )


def test_a_restricted_namespace_is_named_with_its_level() -> None:
    finding = np.check_pod_security("gpu", {np.POD_SECURITY_ENFORCE: "baseline"})
    assert "enforces Pod Security baseline" in finding.message


@pytest.mark.parametrize(
    ("runtime", "support"),
    [
        ("containerd://2.1.4", Severity.OK),
        ("containerd://v2.0.0", Severity.OK),
        ("containerd://1.7.27", Severity.WARN),
        ("containerd://1.6.9", Severity.FAIL),
        ("cri-o://1.31.2", Severity.OK),
        ("cri-o://1.22.0", Severity.FAIL),
        ("docker://27.3.1", Severity.FAIL),
        ("kwok://simulated", None),
        ("", None),
    ],
)
def test_cdi_support_by_runtime_version(runtime: str, support: Severity | None) -> None:
    assert np.cdi_support(runtime) is support


def _node(name: str, runtime: str, reason: str | None = None) -> np.NodeFacts:
    return np.NodeFacts(name=name, runtime=runtime, fabric_reason=reason)


def test_runtimes_are_grouped_by_what_they_mean_for_cdi() -> None:
    findings = np.check_runtimes(
        [
            _node("a", "containerd://2.1.0"),
            _node("b", "containerd://1.7.2"),
            _node("c", "docker://27.0.0"),
            _node("d", "kwok://simulated"),
        ]
    )
    by = {f.severity: f for f in findings}
    assert set(by) == {Severity.FAIL, Severity.WARN, Severity.INFO, Severity.OK}
    assert "c (docker://27.0.0)" in by[Severity.FAIL].message
    assert "b (containerd://1.7.2)" in by[Severity.WARN].message
    assert "enable_cdi = true" in by[Severity.WARN].fix
    assert "d (kwok://simulated)" in by[Severity.INFO].message
    assert by[Severity.OK].message.startswith("1 GPU node(s)")


def test_many_nodes_are_listed_briefly() -> None:
    nodes = [_node(f"n{i:02d}", "docker://27.0.0") for i in range(12)]
    (finding,) = np.check_runtimes(nodes)
    assert "n07 (docker://27.0.0) and 4 more" in finding.message


def test_old_and_unreadable_drivers_from_node_inits_verdict_are_warned() -> None:
    findings = np.check_drivers(
        [
            _node("a", "", "FabricHealthy"),
            _node("b", "", "DriverTooOld"),
            _node("c", "", "DriverVersionUnrecognized"),
            _node("d", "", None),
        ]
    )
    assert [f.severity for f in findings] == [Severity.WARN, Severity.WARN]
    assert "older than 570.158.01 on node(s) b" in findings[0].message
    assert "node(s) c" in findings[1].message


def test_no_verdict_yet_says_nothing_about_drivers() -> None:
    assert np.check_drivers([_node("a", "", None)]) == []


def test_node_facts_are_read_from_the_node_object() -> None:
    node = {
        "metadata": {"name": "n1"},
        "status": {
            "nodeInfo": {"containerRuntimeVersion": "containerd://2.1.4"},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "NVLinkFabricReady", "status": "False", "reason": "DriverTooOld"},
            ],
        },
    }
    assert np.NodeFacts.of(node) == np.NodeFacts("n1", "containerd://2.1.4", "DriverTooOld")
    bare = {"metadata": {"name": "n2"}}
    assert np.NodeFacts.of(bare) == np.NodeFacts("n2", "", None)
