"""Preflight's decisions about the cluster: pure functions from what it showed to findings.

The API server's version and DRA features, and the chart's values against the GPU nodes. Each
``check_*`` takes the facts :mod:`computedomains.hooks.preflight` gathered and returns
:class:`~computedomains.hooks.report.Finding` values; none of them talks to the API server, so
every refusal and its message is tested without a cluster (``tests/unit/test_hooks_preflight.py``).
Who owns what the chart renders is :mod:`computedomains.hooks.ownership`'s.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from computedomains.api import constants

from .report import Finding, Severity, listed

MIN_VERSION = (1, 34)
"""resource.k8s.io/v1 is GA (and on by default) from Kubernetes 1.34."""
RESOURCE_GROUP = "resource.k8s.io"
OPERATOR_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
"""The GPU operator's per-node driver switch: ``true`` (its driver container) or
``pre-installed`` (it found a driver on the host)."""
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
"""Where the GPU operator's driver container exposes the driver on the host."""
GFD_LABEL = "nvidia.com/gfd.timestamp"
"""Set by GPU feature discovery on every node it labels."""


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


# -- values against the cluster ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GpuNode:
    """A node the kubelet plugin will run on, with what node-init or others wrote there."""

    name: str
    labels: Mapping[str, str]
    has_fabric_condition: bool
    """node-init has published a verdict here (a previous install of this chart)."""


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
                    f"{listed(container)}), which puts the driver at {OPERATOR_DRIVER_ROOT}"
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
                    f"({OPERATOR_DRIVER_LABEL}=pre-installed: {listed(host)})"
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
                f"feature discovery ({listed(foreign)}); node-init sets the same label from NVML "
                "and keeps it current, and uninstall leaves GFD's in place"
            ),
        )
    ]
