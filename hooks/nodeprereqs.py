"""Preflight's checks of what the nodes need beyond the chart, where the API can tell.

Pure, like :mod:`computedomains.hooks.compat`: the facts preflight read in, findings out.
- The release namespace's Pod Security level: the node-side pods mount hostPath volumes and
  run as UID 0, which only the ``privileged`` level admits.
- Each GPU node's container runtime (``status.nodeInfo.containerRuntimeVersion``): the
  channels reach workload containers through CDI, which containerd has on by default only
  from 2.0 (1.7 needs ``enable_cdi``), CRI-O from 1.23, and cri-dockerd never.
- node-init's verdict on the driver (the ``NVLinkFabricReady`` condition's reason): nodes whose
  driver is older than the IMEX peer-name support ComputeDomains rely on.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from computedomains.api import constants
from computedomains.fabric import classify
from computedomains.fabric.model import Reason

from . import kubeio
from .report import Finding, Severity, listed

POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
"""The namespace label Pod Security Admission enforces."""
PRIVILEGED = "privileged"
_RUNTIME = re.compile(r"^(?P<name>[a-z0-9-]+)://v?(?P<major>\d+)\.(?P<minor>\d+)")
_LISTED = 8


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What preflight reads of one GPU node for these checks."""

    name: str
    runtime: str
    """``status.nodeInfo.containerRuntimeVersion``, e.g. ``containerd://2.1.4``."""
    fabric_reason: str | None
    """The reason of node-init's ``NVLinkFabricReady`` condition; None before node-init ran."""

    @classmethod
    def of(cls, node: kubeio.Obj) -> NodeFacts:
        """The facts of a Node object as the API returns it."""
        condition = kubeio.condition(node, constants.FABRIC_CONDITION)
        info = (node.get("status") or {}).get("nodeInfo") or {}
        return cls(
            name=kubeio.name(node),
            runtime=str(info.get("containerRuntimeVersion", "")),
            fabric_reason=str(condition.get("reason", "")) if condition is not None else None,
        )


def check_pod_security(namespace: str, labels: Mapping[str, str]) -> Finding:
    """The release namespace admits the node-side pods (Pod Security level ``privileged``)."""
    level = labels.get(POD_SECURITY_ENFORCE)
    fix = f"kubectl label namespace {namespace} {POD_SECURITY_ENFORCE}={PRIVILEGED} --overwrite"
    if level == PRIVILEGED:
        return Finding(Severity.OK, f"namespace {namespace} enforces Pod Security {PRIVILEGED}")
    if level is None:
        return Finding(
            Severity.INFO,
            f"namespace {namespace} sets no Pod Security level, so the cluster's default applies "
            f"(privileged unless the API server's admission configuration sets another); the "
            "kubelet plugin and IMEX agent pods need privileged (hostPath volumes, UID 0)",
            fix=f"to be independent of the default: {fix}",
        )
    return Finding(
        Severity.FAIL,
        f"namespace {namespace} enforces Pod Security {level}: the kubelet plugin and IMEX agent "
        "pods (hostPath volumes, UID 0) would be refused and no node would serve ComputeDomains",
        fix=fix,
    )


def cdi_support(runtime: str) -> Severity | None:
    """How a runtime version string stands on CDI.

    OK: on by default; WARN: there but off by default; FAIL: none; None: a runtime this check
    does not know.
    """
    match = _RUNTIME.match(runtime)
    if match is None:
        return None
    name, version = match["name"], (int(match["major"]), int(match["minor"]))
    if name == "containerd":
        if version >= (2, 0):
            return Severity.OK
        return Severity.WARN if version >= (1, 7) else Severity.FAIL
    if name == "cri-o":
        return Severity.OK if version >= (1, 23) else Severity.FAIL
    if name == "docker":
        return Severity.FAIL
    return None


def check_runtimes(nodes: Sequence[NodeFacts]) -> list[Finding]:
    """Every GPU node's container runtime can inject the channels (CDI)."""
    by: dict[Severity | None, list[NodeFacts]] = {}
    for node in nodes:
        by.setdefault(cdi_support(node.runtime), []).append(node)

    def named(group: list[NodeFacts]) -> str:
        return listed(
            sorted(f"{n.name} ({n.runtime or 'no runtime reported'})" for n in group), _LISTED
        )

    findings = []
    if Severity.FAIL in by:
        findings.append(
            Finding(
                Severity.FAIL,
                "container runtime without CDI on GPU node(s) "
                f"{named(by[Severity.FAIL])}: pods there would get no IMEX channel",
                fix="upgrade to containerd >= 2.0 (or 1.7 with enable_cdi) or CRI-O >= 1.23, "
                "or keep those nodes out of kubeletPlugin.nodeSelector",
            )
        )
    if Severity.WARN in by:
        findings.append(
            Finding(
                Severity.WARN,
                f"containerd 1.7 on GPU node(s) {named(by[Severity.WARN])}: CDI is off unless "
                "enabled; without it pods there get no IMEX channel",
                fix='set enable_cdi = true (and cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]) in '
                "the CRI plugin section of /etc/containerd/config.toml and restart containerd",
            )
        )
    if None in by:
        findings.append(
            Finding(
                Severity.INFO,
                f"CDI support not checked on node(s) {named(by[None])}: runtime not recognised",
            )
        )
    if Severity.OK in by:
        findings.append(
            Finding(Severity.OK, f"{len(by[Severity.OK])} GPU node(s) run a runtime with CDI")
        )
    return findings


def check_drivers(nodes: Sequence[NodeFacts]) -> list[Finding]:
    """node-init found no GPU node whose driver is too old (nothing to say before it ran)."""
    old = [n.name for n in nodes if n.fabric_reason == Reason.DRIVER_TOO_OLD.value]
    unknown = [n.name for n in nodes if n.fabric_reason == Reason.DRIVER_UNKNOWN.value]
    findings = []
    if old:
        findings.append(
            Finding(
                Severity.WARN,
                f"node-init found a driver older than {classify.MINIMUM_DRIVER} on node(s) "
                f"{listed(sorted(old), _LISTED)}: they serve no ComputeDomain until it is upgraded",
                fix=f"install NVIDIA driver >= {classify.MINIMUM_DRIVER} there (the reason and "
                "version are in each node's NVLinkFabricReady condition)",
            )
        )
    if unknown:
        findings.append(
            Finding(
                Severity.WARN,
                "node-init could not read the driver version on node(s) "
                f"{listed(sorted(unknown), _LISTED)}",
                fix="check the driver installation there (NVLinkFabricReady condition)",
            )
        )
    return findings
