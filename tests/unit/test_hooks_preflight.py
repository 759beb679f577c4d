"""Preflight's pure checks (hooks/compat.py): every refusal and its message."""

from __future__ import annotations

import pytest

from computedomains.api import constants
from computedomains.hooks import compat, ownership
from computedomains.hooks.report import Severity

OURS = ownership.Release("cd", "compute-domains")


def _crd(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: tuple[str, ...] = (),
) -> ownership.Existing:
    return ownership.Existing(
        "CustomResourceDefinition", ownership.CRD_NAMES[0], labels or {}, annotations or {}, owners
    )


def _helm(name: str, namespace: str) -> dict[str, str]:
    return {
        ownership.RELEASE_NAME_ANNOTATION: name,
        ownership.RELEASE_NAMESPACE_ANNOTATION: namespace,
    }


@pytest.mark.parametrize(
    ("major", "minor", "expected"),
    [("1", "34", (1, 34)), ("1", "36+", (1, 36)), ("", "x", None)],
)
def test_parse_version(major: str, minor: str, expected: tuple[int, int] | None) -> None:
    assert compat.parse_version(major, minor) == expected


def _version(git: str, major: str, minor: str, **emulation: str) -> dict[str, str]:
    return {"gitVersion": git, "major": major, "minor": minor, **emulation}


def test_too_old_kubernetes_is_refused_with_the_fix() -> None:
    f = compat.check_version(_version("v1.33.5", "1", "33"))
    assert f.severity is Severity.FAIL
    assert (
        f.message
        == "Kubernetes v1.33.5 is too old: this release needs 1.34 or newer (resource.k8s.io/v1)"
    )
    assert "upgrade the control plane to Kubernetes 1.34" in f.fix
    assert compat.check_version(_version("v1.34.0", "1", "34")).severity is Severity.OK
    assert compat.check_version(_version("weird", "", "")).severity is Severity.WARN


def test_an_api_server_emulating_an_old_release_is_judged_by_the_emulated_version() -> None:
    old = _version("v1.36.3", "1", "36", emulationMajor="1", emulationMinor="33")
    f = compat.check_version(old)
    assert f.severity is Severity.FAIL
    assert f.message.startswith("Kubernetes v1.36.3 emulating 1.33 is too old"), f.message
    assert "raise its --emulated-version to 1.34" in f.fix
    same = _version("v1.36.3", "1", "36", emulationMajor="1", emulationMinor="36")
    assert compat.check_version(same).message == "Kubernetes v1.36.3: supported"


def test_resource_v1_missing_is_refused() -> None:
    f = compat.check_resource_api(["v1beta1", "v1beta2"])
    assert f.severity is Severity.FAIL
    assert (
        f.message
        == "resource.k8s.io/v1 is not served (served versions of resource.k8s.io: v1beta1, v1beta2)"
    )
    assert "--runtime-config=resource.k8s.io/v1=true" in f.fix
    assert "none" in compat.check_resource_api([]).message
    assert compat.check_resource_api(["v1", "v1beta2"]).severity is Severity.OK


@pytest.mark.parametrize(
    ("taints", "binding", "value", "path"),
    [
        (True, True, True, "placement: binding conditions and device taints"),
        (
            False,
            False,
            True,
            "placement: the 1.34 fallback (device taints or binding conditions off)",
        ),
        (True, True, False, "placement: the 1.34 fallback (kubeletPlugin.bindingConditions=false)"),
    ],
)
def test_features_print_the_placement_path_and_never_fail(
    taints: bool, binding: bool, value: bool, path: str
) -> None:
    found = compat.check_features(
        compat.DraFeatures(taints, binding, False), binding_conditions_value=value
    )
    assert all(f.severity is Severity.INFO for f in found)
    assert found[-1].message.startswith(path)
    assert "DRA consumable capacity: off" in [f.message for f in found]


def test_unprobed_features_warn() -> None:
    (f,) = compat.check_features(None, binding_conditions_value=True, probe_error="403 forbidden")
    assert f.severity is Severity.WARN and "403 forbidden" in f.message


@pytest.mark.parametrize(
    ("crd", "owner"),
    [
        (_crd(annotations=_helm("cd", "compute-domains")), ownership.Owner.OURS),
        (
            _crd(labels={ownership.NAME_LABEL: "compute-domains", ownership.INSTANCE_LABEL: "cd"}),
            ownership.Owner.OURS,
        ),
        (
            _crd(labels={ownership.NAME_LABEL: "compute-domains"}, annotations=_helm("other", "x")),
            ownership.Owner.OTHER_RELEASE,
        ),
        (
            _crd(labels={ownership.NAME_LABEL: "compute-domains", ownership.INSTANCE_LABEL: "b"}),
            ownership.Owner.OTHER_RELEASE,
        ),
        (_crd(annotations=_helm("nvidia-dra-driver-gpu", "nvidia")), ownership.Owner.HELM_RELEASE),
        (_crd(annotations=_helm("gpu-operator", "gpu-operator")), ownership.Owner.GPU_OPERATOR),
        (_crd(owners=("ClusterPolicy",)), ownership.Owner.GPU_OPERATOR),
        (_crd(), ownership.Owner.UNMANAGED),
    ],
)
def test_owner(crd: ownership.Existing, owner: ownership.Owner) -> None:
    assert ownership.owner(crd, OURS) is owner


def test_crd_of_another_helm_release_is_refused_with_the_adoption_path() -> None:
    findings, adopt = ownership.check_owned(
        [_crd(annotations=_helm("nvidia-dra-driver-gpu", "nvidia"))], OURS, adopt=False
    )
    (f,) = findings
    assert adopt == []
    assert f.severity is Severity.FAIL
    assert f.message == (
        f"CustomResourceDefinition {ownership.CRD_NAMES[0]} is owned by another Helm release "
        "('nvidia-dra-driver-gpu' in namespace nvidia): this chart would take it over"
    )
    assert f.fix.startswith("set adopt.enabled=true")
    assert "--take-ownership" in f.fix and "migrate hook finishes the adoption" in f.fix


def test_crd_of_the_gpu_operator_and_unmanaged_crds_are_refused() -> None:
    findings, _ = ownership.check_owned(
        [_crd(owners=("ClusterPolicy",)), _crd()], OURS, adopt=False
    )
    assert [f.severity for f in findings] == [Severity.FAIL, Severity.FAIL]
    assert "is owned by the GPU operator" in findings[0].message
    assert "owned by no Helm release (installed from a chart's crds/ folder" in findings[1].message


def test_adopt_takes_foreign_objects_but_never_another_release_of_this_chart() -> None:
    foreign = _crd(annotations=_helm("gpu-operator", "gpu-operator"))
    sibling = _crd(
        labels={ownership.NAME_LABEL: "compute-domains"}, annotations=_helm("b", "other")
    )
    findings, adopt = ownership.check_owned([foreign, sibling], OURS, adopt=True)
    assert adopt == [foreign]
    assert [f.severity for f in findings] == [Severity.INFO, Severity.FAIL]
    assert findings[1].message.endswith("one release of compute-domains per cluster")
    assert ownership.adoption_patch(OURS) == {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {
                "meta.helm.sh/release-name": "cd",
                "meta.helm.sh/release-namespace": "compute-domains",
            },
        }
    }


def _ds(
    name: str, labels: dict[str, str], commands: tuple[str, ...] = (), namespace: str = "nvidia"
) -> ownership.Workload:
    return ownership.Workload("DaemonSet", namespace, name, labels, commands)


def test_incumbent_components_are_refused_without_adopt_and_warned_with_it() -> None:
    incumbent = _ds("nvidia-dra-driver-gpu-kubelet-plugin", {}, ("compute-domain-kubelet-plugin",))
    (f,) = ownership.check_workloads([incumbent], OURS, adopt=False)
    assert f.severity is Severity.FAIL
    assert f.message == (
        "DaemonSet nvidia/nvidia-dra-driver-gpu-kubelet-plugin is the incumbent NVIDIA DRA "
        "driver's (a second kubelet plugin for driver compute-domain.nvidia.com)"
    )
    assert f.fix.startswith("set adopt.enabled=true")
    (w,) = ownership.check_workloads(
        [_ds("x", {ownership.NAME_LABEL: "dra-driver-nvidia-gpu"})], OURS, adopt=True
    )
    assert w.severity is Severity.WARN


def test_incumbent_per_domain_daemonsets_are_adoptions_business() -> None:
    per_domain = [
        _ds(f"computedomain-daemon-{i}", {constants.COMPUTE_DOMAIN_LABEL: str(i)}) for i in range(7)
    ]
    (f,) = ownership.check_workloads(per_domain, OURS, adopt=False)
    assert f.severity is Severity.FAIL and f.message.startswith(
        "7 incumbent per-domain daemon DaemonSet(s)"
    )
    assert "and 2 more" in f.message
    (i,) = ownership.check_workloads(per_domain, OURS, adopt=True)
    assert i.severity is Severity.INFO


def test_another_release_of_this_chart_is_refused() -> None:
    other = _ds(
        "b-compute-domains-kubelet-plugin",
        {ownership.NAME_LABEL: "compute-domains", ownership.INSTANCE_LABEL: "b"},
        namespace="b",
    )
    (f,) = ownership.check_workloads([other], OURS, adopt=True)
    assert f.severity is Severity.FAIL
    assert "belongs to another release of this chart ('b' in namespace b)" in f.message
    ours = _ds(
        "cd-compute-domains-kubelet-plugin",
        {ownership.NAME_LABEL: "compute-domains", ownership.INSTANCE_LABEL: "cd"},
        namespace="compute-domains",
    )
    assert ownership.check_workloads([ours], OURS, adopt=False) == []


def _node(name: str, **labels: str) -> compat.GpuNode:
    return compat.GpuNode(name, labels, has_fabric_condition=False)


def test_host_driver_profile_on_gpu_operator_nodes_is_refused() -> None:
    nodes = [_node("gpu-1", **{compat.OPERATOR_DRIVER_LABEL: "true"})]
    (f,) = compat.check_driver_root("/", nodes)
    assert f.severity is Severity.FAIL
    assert f.message == (
        "driverRoot is / but the GPU operator runs its driver container on 1 GPU node(s) "
        "(nvidia.com/gpu.deploy.driver=true: gpu-1), which puts the driver at /run/nvidia/driver"
    )
    assert (
        f.fix
        == "install with the values/gpu-operator.yaml profile (driverRoot: /run/nvidia/driver)"
    )


def test_gpu_operator_profile_on_host_driver_nodes_is_refused() -> None:
    nodes = [_node("gpu-1", **{compat.OPERATOR_DRIVER_LABEL: "pre-installed"})]
    (f,) = compat.check_driver_root("/run/nvidia/driver/", nodes)
    assert f.severity is Severity.FAIL
    assert (
        "have a driver installed on the host (nvidia.com/gpu.deploy.driver=pre-installed: gpu-1)"
        in f.message
    )
    assert f.fix == "install with the values/host-driver.yaml profile (driverRoot: /)"


def test_driver_root_consistent_or_unknowable() -> None:
    operator = [_node("a", **{compat.OPERATOR_DRIVER_LABEL: "true"})]
    assert compat.check_driver_root("/run/nvidia/driver", operator)[0].severity is Severity.OK
    unlabelled = compat.check_driver_root("/home/kubernetes/bin/nvidia", [_node("g")])
    assert [f.severity for f in unlabelled] == [Severity.OK]
    assert unlabelled[0].message == (
        "driverRoot /home/kubernetes/bin/nvidia: consistent with the GPU nodes' driver labels"
    )


def test_no_gpu_nodes_warns() -> None:
    f = compat.check_gpu_nodes([], selector="nvidia.com/gpu.present=true")
    assert f.severity is Severity.WARN and "no node matches" in f.message


def test_gfd_clique_labels_are_said_not_fatal() -> None:
    gfd = _node("a", **{constants.CLIQUE_LABEL: "u.1", compat.GFD_LABEL: "1"})
    ours = compat.GpuNode("b", {constants.CLIQUE_LABEL: "u.1"}, has_fabric_condition=True)
    (f,) = compat.check_clique_labels([gfd, ours])
    assert f.severity is Severity.INFO
    assert f.message.startswith(
        "1 GPU node(s) already carry nvidia.com/gpu.clique from GPU feature discovery (a)"
    )
    assert compat.check_clique_labels([ours]) == []
