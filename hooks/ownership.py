"""Who owns what this chart renders, and what runs already: preflight's conflicting installs.

Another release of this chart, the incumbent NVIDIA DRA driver, the GPU operator or an
unmanaged object: pure functions from the objects preflight found to findings, and the patch
that hands an object to this release when adoption is asked for
(``tests/unit/test_hooks_preflight.py``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from computedomains.api import constants

from .report import Finding, Severity, listed

CHART_NAME = "compute-domains"
"""``app.kubernetes.io/name`` of every object of this chart, whatever the release."""
RELEASE_NAME_ANNOTATION = "meta.helm.sh/release-name"
RELEASE_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
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
_ADOPT = (
    "set adopt.enabled=true (preflight then re-annotates the objects to this release; the "
    "post-install migrate hook finishes the adoption, docs/upgrade.md)"
)


# -- conflicting installs -------------------------------------------------------------------


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


class Owner(enum.StrEnum):
    """Who an existing cluster-scoped object this chart renders belongs to."""

    OURS = "this release"
    OTHER_RELEASE = "another release of this chart"
    GPU_OPERATOR = "the GPU operator"
    HELM_RELEASE = "another Helm release"
    UNMANAGED = "no Helm release"


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


def _incumbent(what: str, *, adopt: bool) -> Finding:
    """The incumbent driver's component ``what``: refused, or (adopting) to remove afterwards."""
    message = (
        f"{what} is the incumbent NVIDIA DRA driver's (a second kubelet plugin for driver "
        f"{constants.DRIVER_NAME})"
    )
    if not adopt:
        return Finding(Severity.FAIL, message, fix=_ADOPT)
    return Finding(
        Severity.WARN,
        message,
        fix=(
            "remove the incumbent's kubelet plugin and controller once this release is "
            "installed (docs/upgrade.md, adoption)"
        ),
    )


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
            findings.append(_incumbent(what, adopt=adopt))
    if per_domain:
        severity = Severity.INFO if adopt else Severity.FAIL
        names = listed([f"{w.namespace}/{w.name}" for w in per_domain])
        findings.append(
            Finding(
                severity,
                (
                    f"{len(per_domain)} incumbent per-domain daemon DaemonSet(s): {names}; "
                    "the migrate hook retires them once this release's IMEX agent serves their "
                    "nodes"
                ),
                fix="" if adopt else _ADOPT,
            )
        )
    return findings
