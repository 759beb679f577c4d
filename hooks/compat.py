"""Preflight's decisions: pure functions from what the cluster showed to findings.

Each ``check_*`` takes the facts :mod:`computedomains.hooks.preflight` gathered and returns
:class:`~computedomains.hooks.report.Finding` values; none of them talks to the API server, so
every refusal and its message is tested without a cluster (``tests/unit/test_hooks_preflight.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import constants

from .report import Finding, Severity

MIN_VERSION = (1, 34)
"""resource.k8s.io/v1 is GA (and on by default) from Kubernetes 1.34."""
RESOURCE_GROUP = "resource.k8s.io"
CHART_NAME = "compute-domains"
"""``app.kubernetes.io/name`` of every object of this chart, whatever the release."""
RELEASE_NAME_ANNOTATION = "meta.helm.sh/release-name"
RELEASE_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
VERSION_LABEL = constants.VERSION_LABEL
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
"""On a DaemonSet: the generation of its pod template (the apps/v1 API keeps it up to date)."""
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
"""On a DaemonSet's pod: the template generation it was made from (its controller sets it)."""
REVISION_HASH_LABEL = "controller-revision-hash"
"""On a DaemonSet's pod: the hash of the template revision it was made from."""
CRD_NAMES = (
    f"{constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP}",
    f"{constants.CLIQUE_PLURAL}.{constants.GROUP}",
)
DEVICE_CLASS_NAMES = (constants.CHANNEL_DEVICE_CLASS, constants.DAEMON_DEVICE_CLASS)
"""The DeviceClasses this chart renders, under the incumbent's names."""
INCUMBENT_CHART_NAMES = frozenset(
    {"dra-driver-nvidia-gpu", "nvidia-dra-driver-gpu", "k8s-dra-driver-gpu"}
)
"""The incumbent driver chart's names over its history (its ``app.kubernetes.io/name``)."""
INCUMBENT_COMMANDS = frozenset({"compute-domain-kubelet-plugin", "compute-domain-controller"})
GPU_OPERATOR_MARK = "gpu-operator"
OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
"""The GPU operator's per-node driver switch: ``true`` (its driver container) or
``pre-installed`` (it found a driver on the host)."""
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
"""Where the GPU operator's driver container exposes the driver on the host."""
GFD_LABEL = "nvidia.com/gfd.timestamp"
"""Set by GPU feature discovery on every node it labels."""
_ADOPT = (
    "set adopt.enabled=true (preflight then re-annotates the objects to this release; the "
    "post-install migrate hook finishes the adoption, docs/upgrade.md)"
)


# -- the API server ---------------------------------------------------------------------------


def parse_version(major: str, minor: str) -> tuple[int, int] | None:
    """``/version``'s major and minor as numbers (providers append ``+``); None if unreadable."""
    digits = [re.match(r"\d+", part) for part in (major, minor)]
    if digits[0] is None or digits[1] is None:
        return None
    return int(digits[0].group()), int(digits[1].group())


def served_version(info: Mapping[str, object]) -> tuple[str, tuple[int, int] | None]:
    """What ``/version`` says the API server behaves as: a label to print and (major, minor).

    An API server started with ``--emulated-version`` serves the APIs and features of the
    emulated release, which it reports as ``emulationMajor``/``emulationMinor`` beside its own
    binary version; that is the version this release depends on.
    """
    git_version = str(info.get("gitVersion", "?"))
    emulated = parse_version(
        str(info.get("emulationMajor", "")), str(info.get("emulationMinor", ""))
    )
    binary = parse_version(str(info.get("major", "")), str(info.get("minor", "")))
    if emulated is not None and emulated != binary:
        return f"{git_version} emulating {emulated[0]}.{emulated[1]}", emulated
    return git_version, binary


def check_version(info: Mapping[str, object]) -> Finding:
    """Kubernetes 1.34 or newer, from the ``/version`` answer ``info``."""
    label, version = served_version(info)
    need = f"{MIN_VERSION[0]}.{MIN_VERSION[1]}"
    emulation = f" (or raise its --emulated-version to {need})" if "emulating" in label else ""
    if version is None:
        return Finding(
            Severity.WARN,
            f"Kubernetes version {label!r} is unreadable; assuming it is {need} or newer",
        )
    if version < MIN_VERSION:
        return Finding(
            Severity.FAIL,
            (
                f"Kubernetes {label} is too old: this release needs {need} or newer "
                "(resource.k8s.io/v1)"
            ),
            fix=(
                f"upgrade the control plane to Kubernetes {need} or newer{emulation}, or stay "
                "on the previous driver"
            ),
        )
    return Finding(Severity.OK, f"Kubernetes {label}: supported")


def check_resource_api(served: Sequence[str]) -> Finding:
    """``resource.k8s.io/v1`` served; ``served`` lists the group's versions discovery showed."""
    if "v1" in served:
        return Finding(Severity.OK, f"{RESOURCE_GROUP}/v1 served")
    shown = ", ".join(served) if served else "none"
    return Finding(
        Severity.FAIL,
        f"{RESOURCE_GROUP}/v1 is not served (served versions of {RESOURCE_GROUP}: {shown})",
        fix=(
            "enable Dynamic Resource Allocation on the API server "
            f"(--runtime-config={RESOURCE_GROUP}/v1=true, feature gate DynamicResourceAllocation "
            "on)"
        ),
    )


@dataclasses.dataclass(frozen=True)
class DraFeatures:
    """What a server-side dry-run of a ResourceSlice kept: a dropped field is a gate that is off."""

    device_taints: bool
    """DRADeviceTaints (beta, on by default from 1.36)."""
    binding_conditions: bool
    """DRADeviceBindingConditions (beta, on by default from 1.36)."""
    consumable_capacity: bool
    """DRAConsumableCapacity (this release does not rely on it; reported for completeness)."""


def check_features(
    features: DraFeatures | None, *, binding_conditions_value: bool, probe_error: str = ""
) -> list[Finding]:
    """Which DRA features the API server keeps, and the placement path that follows.

    See docs/placement.md.

    Never a failure: on 1.34/1.35 the release uses its fallback placement.
    """
    if features is None:
        return [
            Finding(
                Severity.WARN,
                (
                    f"could not probe the DRA features ({probe_error}); placement falls back to "
                    "CEL steering if they are off"
                ),
            )
        ]
    found = [
        Finding(Severity.INFO, f"DRA {name}: {'on' if on else 'off'}")
        for name, on in (
            ("device taints", features.device_taints),
            ("binding conditions", features.binding_conditions),
            ("consumable capacity", features.consumable_capacity),
        )
    ]
    if features.device_taints and features.binding_conditions and binding_conditions_value:
        path = (
            "placement: binding conditions and device taints (races for a free node resolved "
            "before binding)"
        )
    elif not binding_conditions_value:
        path = (
            "placement: the 1.34 fallback (kubeletPlugin.bindingConditions=false): CEL steering, "
            "stranded pods re-created"
        )
    else:
        path = (
            "placement: the 1.34 fallback (device taints or binding conditions off): CEL "
            "steering, stranded pods re-created"
        )
    found.append(Finding(Severity.INFO, path + "; see docs/placement.md"))
    return found


# -- conflicting installs -------------------------------------------------------------------


class Owner(enum.StrEnum):
    """Who an existing cluster-scoped object this chart renders belongs to."""

    OURS = "this release"
    OTHER_RELEASE = "another release of this chart"
    GPU_OPERATOR = "the GPU operator"
    HELM_RELEASE = "another Helm release"
    UNMANAGED = "no Helm release"


@dataclasses.dataclass(frozen=True)
class Existing:
    """An object that exists already, with the metadata that says who owns it."""

    kind: str
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kinds: tuple[str, ...] = ()
    """Kinds of its ownerReferences (the GPU operator owns its objects by its ClusterPolicy)."""


@dataclasses.dataclass(frozen=True)
class Release:
    """The release being installed: Helm's (or the Argo CD application's) name and namespace."""

    name: str
    namespace: str


def owner(obj: Existing, release: Release) -> Owner:
    """Who owns ``obj``. Argo CD renders without a release, so our labels count as ours too."""
    annotations, labels = obj.annotations, obj.labels
    helm_name = annotations.get(RELEASE_NAME_ANNOTATION)
    helm_namespace = annotations.get(RELEASE_NAMESPACE_ANNOTATION)
    marks = " ".join([*labels.values(), *annotations.values(), *obj.owner_kinds]).lower()
    if GPU_OPERATOR_MARK in marks or "ClusterPolicy" in obj.owner_kinds:
        return Owner.GPU_OPERATOR
    if helm_name is not None:
        if (helm_name, helm_namespace) == (release.name, release.namespace):
            return Owner.OURS
        return Owner.OTHER_RELEASE if labels.get(NAME_LABEL) == CHART_NAME else Owner.HELM_RELEASE
    if labels.get(NAME_LABEL) == CHART_NAME:
        return Owner.OURS if labels.get(INSTANCE_LABEL) == release.name else Owner.OTHER_RELEASE
    return Owner.UNMANAGED


def describe_owner(obj: Existing, found: Owner) -> str:
    """``owned by <who>``, naming the Helm release when there is one."""
    name = obj.annotations.get(RELEASE_NAME_ANNOTATION) or obj.labels.get(INSTANCE_LABEL)
    namespace = obj.annotations.get(RELEASE_NAMESPACE_ANNOTATION)
    if found in (Owner.OTHER_RELEASE, Owner.HELM_RELEASE) and name:
        where = f" in namespace {namespace}" if namespace else ""
        return f"owned by {found} ({name!r}{where})"
    if found is Owner.UNMANAGED:
        return (
            "owned by no Helm release (installed from a chart's crds/ folder, as the incumbent "
            "driver does, or by kubectl)"
        )
    return f"owned by {found}"


def adoption_patch(release: Release) -> dict[str, dict[str, dict[str, str]]]:
    """The metadata merge patch that hands an object to ``release``.

    These are what Helm checks before it adopts an existing object.
    """
    return {
        "metadata": {
            "labels": {MANAGED_BY_LABEL: "Helm"},
            "annotations": {
                RELEASE_NAME_ANNOTATION: release.name,
                RELEASE_NAMESPACE_ANNOTATION: release.namespace,
            },
        }
    }


def check_owned(
    objects: Sequence[Existing], release: Release, *, adopt: bool
) -> tuple[list[Finding], list[Existing]]:
    """Findings about the CRDs and DeviceClasses that exist already, and those to adopt.

    Absent objects are fine (a first install). Another release of this chart cannot be adopted:
    two releases would run two kubelet plugins for one driver. Anything else is adopted with
    ``adopt``, and refused without it, with the adoption path in the fix.
    """
    findings: list[Finding] = []
    to_adopt: list[Existing] = []
    for obj in objects:
        found = owner(obj, release)
        what = f"{obj.kind} {obj.name}"
        if found is Owner.OURS:
            findings.append(Finding(Severity.OK, f"{what}: owned by this release"))
        elif found is Owner.OTHER_RELEASE:
            findings.append(
                Finding(
                    Severity.FAIL,
                    (
                        f"{what} is {describe_owner(obj, found)}: one release of compute-domains "
                        "per cluster"
                    ),
                    fix=(
                        "upgrade that release instead (helm upgrade <its name> --namespace <its "
                        "namespace>), or uninstall it first"
                    ),
                )
            )
        elif adopt:
            to_adopt.append(obj)
            findings.append(
                Finding(
                    Severity.INFO,
                    f"{what} is {describe_owner(obj, found)}: adopting it (adopt.enabled=true)",
                )
            )
        else:
            findings.append(
                Finding(
                    Severity.FAIL,
                    f"{what} is {describe_owner(obj, found)}: this chart would take it over",
                    fix=(
                        f"{_ADOPT}; with plain Helm also pass --take-ownership (Helm 3.17+), "
                        "which skips its ownership check"
                    ),
                )
            )
    return findings, to_adopt


@dataclasses.dataclass(frozen=True)
class Workload:
    """A DaemonSet or Deployment somewhere in the cluster."""

    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]
    commands: tuple[str, ...]
    """The first word of each container's command (or args when there is no command)."""


def check_workloads(
    workloads: Sequence[Workload], release: Release, *, adopt: bool
) -> list[Finding]:
    """Another release of this chart, or the incumbent driver's components, running already.

    The incumbent's per-domain daemon DaemonSets (label ``resource.nvidia.com/computeDomain``)
    are adoption's business: reported, and retired by the migrate hook once our agent serves
    the node.
    """
    findings: list[Finding] = []
    per_domain = [w for w in workloads if constants.COMPUTE_DOMAIN_LABEL in w.labels]
    for w in workloads:
        what = f"{w.kind} {w.namespace}/{w.name}"
        name = w.labels.get(NAME_LABEL)
        if name == CHART_NAME:
            if (w.labels.get(INSTANCE_LABEL), w.namespace) != (release.name, release.namespace):
                findings.append(
                    Finding(
                        Severity.FAIL,
                        (
                            f"{what} belongs to another release of this chart "
                            f"({w.labels.get(INSTANCE_LABEL)!r} in namespace {w.namespace}): one "
                            "release per cluster"
                        ),
                        fix="upgrade that release instead, or uninstall it first",
                    )
                )
        elif w in per_domain:
            continue
        elif name in INCUMBENT_CHART_NAMES or INCUMBENT_COMMANDS.intersection(w.commands):
            message = (
                f"{what} is the incumbent NVIDIA DRA driver's (a second kubelet plugin for driver "
                f"{constants.DRIVER_NAME})"
            )
            if adopt:
                findings.append(
                    Finding(
                        Severity.WARN,
                        message,
                        fix=(
                            "remove the incumbent's kubelet plugin and controller once this "
                            "release is installed (docs/upgrade.md, adoption)"
                        ),
                    )
                )
            else:
                findings.append(Finding(Severity.FAIL, message, fix=_ADOPT))
    if per_domain:
        severity = Severity.INFO if adopt else Severity.FAIL
        names = ", ".join(f"{w.namespace}/{w.name}" for w in per_domain[:5])
        more = f" and {len(per_domain) - 5} more" if len(per_domain) > 5 else ""
        findings.append(
            Finding(
                severity,
                (
                    f"{len(per_domain)} incumbent per-domain daemon DaemonSet(s): {names}{more}; "
                    "the migrate hook retires them once this release's IMEX agent serves their "
                    "nodes"
                ),
                fix="" if adopt else _ADOPT,
            )
        )
    return findings


# -- values against the cluster ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GpuNode:
    """A node the kubelet plugin will run on, with what node-init or others wrote there."""

    name: str
    labels: Mapping[str, str]
    has_fabric_condition: bool
    """node-init has published a verdict here (a previous install of this chart)."""


def _listed(nodes: Sequence[str]) -> str:
    more = f" and {len(nodes) - 5} more" if len(nodes) > 5 else ""
    return ", ".join(nodes[:5]) + more


def check_driver_root(driver_root: str, nodes: Sequence[GpuNode]) -> list[Finding]:
    """The driverRoot value against the GPU operator's driver label on the GPU nodes.

    A wrong driver root fails discovery on every node alike (node-init reports
    DiscoveryFailed), so it is refused here with the profile to use. Nodes without the label
    say nothing either way (a host driver without the operator, GKE's own path).
    """
    root = driver_root.rstrip("/") or "/"
    container = [n.name for n in nodes if n.labels.get(OPERATOR_DRIVER_LABEL) == "true"]
    host = [n.name for n in nodes if n.labels.get(OPERATOR_DRIVER_LABEL) == "pre-installed"]
    findings: list[Finding] = []
    if container and root != OPERATOR_DRIVER_ROOT:
        findings.append(
            Finding(
                Severity.FAIL,
                (
                    f"driverRoot is {driver_root} but the GPU operator runs its driver container "
                    f"on {len(container)} GPU node(s) ({OPERATOR_DRIVER_LABEL}=true: "
                    f"{_listed(container)}), which puts the driver at {OPERATOR_DRIVER_ROOT}"
                ),
                fix=(
                    "install with the values/gpu-operator.yaml profile (driverRoot: "
                    f"{OPERATOR_DRIVER_ROOT})"
                ),
            )
        )
    if host and root == OPERATOR_DRIVER_ROOT:
        findings.append(
            Finding(
                Severity.FAIL,
                (
                    f"driverRoot is {OPERATOR_DRIVER_ROOT} (the GPU operator's driver container) "
                    f"but {len(host)} GPU node(s) have a driver installed on the host "
                    f"({OPERATOR_DRIVER_LABEL}=pre-installed: {_listed(host)})"
                ),
                fix="install with the values/host-driver.yaml profile (driverRoot: /)",
            )
        )
    if not findings:
        findings.append(
            Finding(
                Severity.OK,
                f"driverRoot {driver_root}: consistent with the GPU nodes' driver labels",
            )
        )
    return findings


def check_gpu_nodes(nodes: Sequence[GpuNode], *, selector: str) -> Finding:
    """Some node matches the kubelet plugin's node selector."""
    if not nodes:
        return Finding(
            Severity.WARN,
            (
                f"no node matches the kubelet plugin's node selector ({selector or 'none'}): "
                "nothing will serve ComputeDomains yet"
            ),
            fix=(
                "label the GPU nodes (GPU feature discovery sets nvidia.com/gpu.present=true) or "
                "set kubeletPlugin.nodeSelector"
            ),
        )
    return Finding(
        Severity.OK,
        f"{len(nodes)} GPU node(s) match the kubelet plugin's node selector ({selector})",
    )


def check_clique_labels(nodes: Sequence[GpuNode]) -> list[Finding]:
    """Clique labels someone else (GPU feature discovery) set already: said, never fatal.

    node-init labels every node of an NVLink clique with ``nvidia.com/gpu.clique`` from NVML,
    the same value GFD derives, so the two agree; node-init's write wins if they ever differ.
    """
    foreign = [
        n.name
        for n in nodes
        if constants.CLIQUE_LABEL in n.labels
        and (GFD_LABEL in n.labels or not n.has_fabric_condition)
    ]
    if not foreign:
        return []
    return [
        Finding(
            Severity.INFO,
            (
                f"{len(foreign)} GPU node(s) already carry {constants.CLIQUE_LABEL} from GPU "
                f"feature discovery ({_listed(foreign)}); node-init sets the same label from NVML "
                "and keeps it current, and uninstall leaves GFD's in place"
            ),
        )
    ]


# -- DaemonSet pods -----------------------------------------------------------------------


def match_labels(workload: Mapping[str, Any]) -> str:
    """A workload's ``spec.selector.matchLabels`` as a label selector string."""
    selector = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def current_pods(pods: Sequence[Mapping[str, Any]], daemonset: Mapping[str, Any]) -> set[str]:
    """UIDs of the DaemonSet's pods made from its current pod template.

    As the DaemonSet controller decides it: the pod's template generation is the DaemonSet's,
    or its ``controller-revision-hash`` is that of such a pod (after a rollback the template,
    and so the hash, is an older one again while the generation moved on).
    """
    annotations = (daemonset.get("metadata") or {}).get("annotations") or {}
    generation = annotations.get(TEMPLATE_GENERATION_ANNOTATION)

    def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
        return (pod.get("metadata") or {}).get("labels") or {}

    newest = [p for p in pods if generation is not None
              and labels(p).get(TEMPLATE_GENERATION_LABEL) == generation]  # fmt: skip
    hashes = {labels(p).get(REVISION_HASH_LABEL) for p in newest} - {None}
    return {
        str((p.get("metadata") or {}).get("uid"))
        for p in pods
        if p in newest or labels(p).get(REVISION_HASH_LABEL) in hashes
    }
