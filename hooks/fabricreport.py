"""Verify's decisions: the NVLink fabric per rack, and whether the release is healthy.

Pure: each function takes what :mod:`computedomains.hooks.verify` read and returns lines or
:class:`~computedomains.hooks.report.Finding` values (``tests/unit/test_hooks_verify.py``).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

from computedomains.api import constants
from computedomains.fabric.model import Reason

from .report import Finding, Severity, listed


@dataclasses.dataclass(frozen=True)
class NodeFabric:
    """What node-init published for one GPU node."""

    name: str
    clique: str
    """The node's ``nvidia.com/gpu.clique`` label (``<clusterUUID>.<cliqueID>``), or ''."""
    status: str | None
    """Status of the NVLinkFabricReady condition; None when the node has none."""
    reason: str = ""
    message: str = ""
    initialized: bool = False
    """The node's kubelet plugin pod is past its node-init init container, so a node without
    the condition has been judged: node-init removes it where there is no fabric."""

    @property
    def judged(self) -> bool:
        """Whether node-init's verdict on this node is in."""
        return self.status is not None or self.initialized


def unjudged(nodes: Sequence[NodeFabric]) -> list[str]:
    """The nodes still waiting for node-init's verdict."""
    return [n.name for n in nodes if not n.judged]


def fabric_lines(nodes: Sequence[NodeFabric]) -> list[str]:
    """The fabric per rack (NVLink cluster UUID), clique by clique, then the nodes outside."""
    racks: dict[str, dict[str, list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for n in nodes:
        if n.status == "True" and n.clique:
            rack, _, clique = n.clique.rpartition(".")
            racks[rack][clique].append(n.name)
    lines = []
    for rack in sorted(racks):
        cliques = racks[rack]
        total = sum(len(v) for v in cliques.values())
        lines.append(f"rack (NVLink cluster) {rack}: {len(cliques)} clique(s), {total} node(s)")
        for clique in sorted(cliques, key=lambda c: (len(c), c)):
            members = sorted(cliques[clique])
            lines.append(f"  clique {rack}.{clique}: {len(members)} node(s): {', '.join(members)}")
    for n in sorted(nodes, key=lambda n: n.name):
        if n.status == "True" and n.reason == Reason.DEGRADED.value:
            lines.append(f"degraded: {n.name}: {n.reason}: {n.message}")
        elif n.status == "False":
            lines.append(f"broken: {n.name}: {n.reason}: {n.message}")
        elif n.status is None and n.initialized:
            lines.append(f"no NVLink fabric: {n.name}")
        elif n.status is None:
            lines.append(f"no verdict yet: {n.name} (its kubelet plugin pod has not run node-init)")
    if not nodes:
        lines.append("no GPU nodes: nothing to report")
    return lines


def check_verdicts(nodes: Sequence[NodeFabric], *, waited: float) -> Finding:
    """Every GPU node judged; broken ones are the fabric's state, not the release's failure."""
    missing = unjudged(nodes)
    if missing:
        shown = listed(missing)
        return Finding(
            Severity.FAIL,
            f"no fabric verdict after {waited:g}s on {len(missing)} GPU node(s): {shown}",
            fix=(
                "look at the kubelet plugin pods on those nodes (kubectl describe pod; the "
                "node-init container's log), or raise verify.timeoutSeconds"
            ),
        )
    broken = sum(1 for n in nodes if n.status == "False")
    note = f" ({broken} broken: see above)" if broken else ""
    return Finding(Severity.OK, f"node-init's verdict is in on all {len(nodes)} GPU node(s){note}")


@dataclasses.dataclass(frozen=True)
class PodVersion:
    """One ready pod of an ``OnDelete`` DaemonSet still on an older pod template."""

    node: str
    version: str
    """Its ``app.kubernetes.io/version`` (the chart's appVersion it was made by)."""


@dataclasses.dataclass(frozen=True)
class Component:
    """One of our DaemonSets or Deployments and how many of its pods are ready and current."""

    kind: str
    name: str
    wanted: int
    ready: int
    updated: int
    on_delete: bool = False
    """A DaemonSet with ``updateStrategy: OnDelete``: a pod takes a new template only once
    deleted, so after an upgrade older pods are expected until someone rolls them."""
    previous: tuple[PodVersion, ...] = ()
    """Its ready pods still on an older template (``on_delete`` only)."""

    @property
    def settled(self) -> bool:
        """Whether verify need wait no longer for this component."""
        if self.on_delete:
            return self.ready >= self.wanted
        return min(self.ready, self.updated) >= self.wanted


def supported_skew(version: str, current: str) -> bool:
    """Whether a pod of ``version`` may run beside components of ``current``.

    The controller and the kubelet plugin of one release work with IMEX agents of the same
    release line and of the one before it (``0.1.x`` beside ``0.2.y``), never with newer ones.
    """

    def line(text: str) -> tuple[int, int] | None:
        parts = text.lstrip("v").split(".")
        if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
            return None
        return int(parts[0]), int(parts[1])

    old, new = line(version), line(current)
    if old is None or new is None or old[0] != new[0]:
        return False
    return 0 <= new[1] - old[1] <= 1


def _check_on_delete(c: Component, *, current: str, roll_hint: str) -> Finding:
    what = f"{c.kind} {c.name}: {c.ready}/{c.wanted} ready, {c.updated} updated"
    if c.ready < c.wanted:
        return Finding(
            Severity.FAIL, what, fix=f"kubectl describe daemonset {c.name} (and its pods' Events)"
        )
    unsupported = sorted(f"{p.node} ({p.version or 'unknown'})" for p in c.previous
                         if not supported_skew(p.version, current))  # fmt: skip
    if unsupported:
        return Finding(
            Severity.FAIL,
            f"{what}; pods of a version {current} cannot work beside: {listed(unsupported, 8)}",
            fix=f"delete those pods (updateStrategy OnDelete), one clique at a time: {roll_hint}",
        )
    if not c.previous:
        return Finding(Severity.OK, what)
    versions = ", ".join(sorted({p.version for p in c.previous}))
    nodes = sorted(p.node for p in c.previous)
    return Finding(
        Severity.WARN,
        f"{what}; {len(nodes)} node(s) still run version {versions} (updateStrategy OnDelete; "
        f"supported beside {current}): {listed(nodes, 8)}",
        fix=f"roll the nodes no ComputeDomain holds: {roll_hint}; held ones follow once idle",
    )


def check_components(
    components: Sequence[Component], *, current: str = "", roll_hint: str = ""
) -> list[Finding]:
    """Each component has all its pods ready at the current version.

    An ``OnDelete`` DaemonSet passes with pods of the previous version (``current``: this
    chart's appVersion) as long as all are ready; the finding names the nodes still on it
    and ``roll_hint`` says how to roll them.
    """
    if not components:
        return [
            Finding(
                Severity.FAIL,
                "no DaemonSet or Deployment of this release in its namespace",
                fix="check the release namespace (--namespace) and that the install applied",
            )
        ]
    findings = []
    for c in components:
        if c.on_delete:
            findings.append(_check_on_delete(c, current=current, roll_hint=roll_hint))
            continue
        what = f"{c.kind} {c.name}: {c.ready}/{c.wanted} ready, {c.updated} updated"
        if c.settled:
            findings.append(Finding(Severity.OK, what))
        else:
            findings.append(
                Finding(
                    Severity.FAIL,
                    what,
                    fix=f"kubectl describe {c.kind.lower()} {c.name} (and its pods' Events)",
                )
            )
    return findings


def check_crds(established: Mapping[str, bool | None]) -> list[Finding]:
    """Each CRD exists and is Established (None: absent)."""
    findings = []
    for name, state in established.items():
        if state:
            findings.append(Finding(Severity.OK, f"CRD {name}: Established"))
        else:
            findings.append(
                Finding(
                    Severity.FAIL,
                    f"CRD {name}: {'missing' if state is None else 'not Established'}",
                    fix=f"kubectl describe crd {name} (with crds.enabled=false, install it first)",
                )
            )
    return findings


def check_device_classes(present: Mapping[str, bool]) -> list[Finding]:
    """Each DeviceClass of the chart exists."""
    return [
        Finding(Severity.OK, f"DeviceClass {name}: present")
        if there
        else Finding(
            Severity.FAIL,
            f"DeviceClass {name}: missing",
            fix="re-apply the release (helm upgrade, or an Argo CD sync)",
        )
        for name, there in present.items()
    ]


def check_dry_run(error: str) -> Finding:
    """A v1beta2 ComputeDomain passes admission (schema, conversion, validation webhook)."""
    if not error:
        return Finding(
            Severity.OK, f"a {constants.COMPUTE_DOMAIN_KIND} (v1beta2) is accepted (dry run)"
        )
    return Finding(
        Severity.FAIL,
        f"a dry-run {constants.COMPUTE_DOMAIN_KIND} (v1beta2) was refused: {error}",
        fix="check the webhook's pods and Service, and the CRD's conversion settings",
    )


def apply_policy(findings: Sequence[Finding], policy: str) -> list[Finding]:
    """With policy ``Warn`` failures become warnings; ``Fail`` keeps them."""
    if policy == "Fail":
        return list(findings)
    return [
        dataclasses.replace(f, severity=Severity.WARN) if f.severity is Severity.FAIL else f
        for f in findings
    ]
