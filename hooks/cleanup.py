"""Uninstall's decisions: refuse while domains have running pods; what to remove from each node.

Pure: the functions take what :mod:`computedomains.hooks.uninstall` read and return a refusal
or a plan (``tests/unit/test_hooks_uninstall.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import constants, domainview

from .compat import GFD_LABEL
from .report import Finding, Severity

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
CRD_DELETE_COMMAND = (
    f"kubectl delete crd {constants.COMPUTE_DOMAIN_PLURAL}.{constants.GROUP} "
    f"{constants.CLIQUE_PLURAL}.{constants.GROUP}"
)
"""Removes the CRDs the chart keeps, and with them every ComputeDomain and clique."""


@dataclasses.dataclass(frozen=True)
class Pod:
    """A pod that may belong to a domain: it names ResourceClaimTemplates."""

    namespace: str
    name: str
    phase: str
    templates: tuple[str, ...]


def running_pods(
    domains: Sequence[domainview.Domain], pods: Sequence[Pod]
) -> dict[domainview.Domain, list[str]]:
    """Each domain with unfinished workload pods, and those pods' names."""
    by_template = {(d.namespace, d.template): d for d in domains}
    found: dict[domainview.Domain, list[str]] = {}
    for pod in pods:
        if pod.phase in FINISHED_PHASES:
            continue
        for template in pod.templates:
            domain = by_template.get((pod.namespace, template))
            if domain is not None:
                found.setdefault(domain, []).append(pod.name)
    return found


def check_live(
    domains: Sequence[domainview.Domain], pods: Sequence[Pod], *, force: bool, release: str
) -> Finding:
    """Refuse (unless ``force``) while any domain has workload pods that have not finished."""
    live = running_pods(domains, pods)
    if not live:
        return Finding(Severity.OK, f"{len(domains)} ComputeDomain(s), none with running pods")
    named = "; ".join(
        f"{d.namespace}/{d.name} (pods: {', '.join(sorted(p)[:5])}{' ...' if len(p) > 5 else ''})"
        for d, p in sorted(live.items(), key=lambda kv: (kv[0].namespace, kv[0].name))
    )
    if force:
        return Finding(
            Severity.WARN,
            f"uninstalling under running workloads (uninstall.force=true): {named}; their IMEX "
            "domains stop with the components",
        )
    return Finding(
        Severity.FAIL,
        f"{len(live)} ComputeDomain(s) have running pods: {named}",
        fix=(
            "delete those workloads (or their ComputeDomains) and retry; or uninstall anyway "
            "(their jobs lose IMEX): this refusal left the release 'uninstalling', so run "
            f"`helm rollback {release}`, then `helm upgrade {release} <chart> --reuse-values "
            f"--set uninstall.force=true`, then `helm uninstall {release}` again"
        ),
    )


def finalizers_without_ours(domain: domainview.Domain) -> list[str] | None:
    """The domain's finalizers without ours; None when it carries none of ours."""
    if constants.FINALIZER not in domain.finalizers:
        return None
    return [f for f in domain.finalizers if f != constants.FINALIZER]


@dataclasses.dataclass(frozen=True)
class NodeState:
    """What a node carries that a component of ours may have put there."""

    name: str
    labels: Mapping[str, str]
    has_condition: bool
    taints: tuple[Mapping[str, Any], ...]


@dataclasses.dataclass(frozen=True)
class NodeCleanup:
    """What to remove from one node."""

    labels: tuple[str, ...]
    condition: bool
    taints: list[Mapping[str, Any]] | None
    """The node's taints without ours; None when it has none of ours."""

    @property
    def empty(self) -> bool:
        """Nothing to do on this node."""
        return not self.labels and not self.condition and self.taints is None

    def describe(self) -> str:
        """One line: what is removed."""
        parts = [f"label {k}" for k in self.labels]
        if self.condition:
            parts.append(f"condition {constants.FABRIC_CONDITION}")
        if self.taints is not None:
            parts.append(f"taint {constants.FABRIC_TAINT}")
        return ", ".join(parts)


def node_cleanup(node: NodeState) -> NodeCleanup:
    """Our label, condition and taint on ``node``; the clique label only where node-init set it.

    node-init does not mark the clique label as its own, and GPU feature discovery writes the
    same label: it counts as node-init's where node-init has judged the node (the fabric
    condition is there) and GFD does not label it (no ``nvidia.com/gfd.timestamp``).
    """
    labels = (
        [constants.COMPUTE_DOMAIN_LABEL] if constants.COMPUTE_DOMAIN_LABEL in node.labels else []
    )
    if (
        constants.CLIQUE_LABEL in node.labels
        and node.has_condition
        and GFD_LABEL not in node.labels
    ):
        labels.append(constants.CLIQUE_LABEL)
    kept = [t for t in node.taints if t.get("key") != constants.FABRIC_TAINT]
    return NodeCleanup(
        labels=tuple(labels),
        condition=node.has_condition,
        taints=kept if len(kept) != len(node.taints) else None,
    )


# -- is this an uninstall at all? ------------------------------------------------------------

ARGO_TRACKING = ("argocd.argoproj.io/tracking-id", "argocd.argoproj.io/instance")
"""What Argo CD sets on every object it applies (annotation tracking; the label variant)."""

HELM_UNINSTALLING = "uninstalling"
"""The status Helm gives the release's latest record before it runs the pre-delete hooks."""


@dataclasses.dataclass(frozen=True)
class ReleaseRecord:
    """Helm's record of one revision (Secret or ConfigMap ``sh.helm.release.v1.<name>.v<n>``).

    Helm labels it ``owner=helm``, ``name=<release>``, ``status=<the revision's status>``.
    """

    name: str
    labels: Mapping[str, str]

    def of(self, release: str) -> bool:
        """Whether Helm keeps it, for ``release`` (not an object that merely has the name)."""
        return self.labels.get("owner") == "helm" and self.labels.get("name") == release

    @property
    def status(self) -> str:
        """The revision's status as Helm labelled it ("" when unlabelled)."""
        return self.labels.get("status", "")


def uninstalling(
    *, release: str, record: ReleaseRecord | None, argo_tracked: bool, required: bool
) -> Finding:
    """Whether the hook runs because its release is being uninstalled; nothing else may run it.

    Helm marks the release's latest record ``uninstalling`` before it runs the pre-delete
    hooks. A record that merely exists proves nothing: ``helm template`` renders revision 1, so
    a render applied beside a Helm release of the same name names that release's record. A
    record of the release in another status refuses (exit 1, nothing changed) instead of
    passing quietly: Helm itself meets one when the current revision is a rollback (it runs the
    hooks of the revision rolled back to), and going on there would leave our finalizers
    behind. Argo CD runs PreDelete hooks only while deleting the Application, and marks what it
    creates as its own. A Job of a rendered chart applied as plain objects (``helm template |
    kubectl apply``, kustomize's helmCharts) has neither: it changes nothing. ``required``
    False (value uninstall.requireOwner) skips the check.
    """
    if not required:
        return Finding(
            Severity.INFO,
            "not checking who runs this (run by hand, or uninstall.requireOwner=false)",
        )
    ours = record if record is not None and record.of(release) else None
    if ours is not None and ours.status == HELM_UNINSTALLING:
        return Finding(
            Severity.OK, f"Helm is uninstalling release {release} (its record {ours.name} says so)"
        )
    if argo_tracked:
        return Finding(Severity.OK, "Argo CD is deleting the Application (it created this Job)")
    if ours is not None:
        return Finding(
            Severity.FAIL,
            f"not an uninstall of release {release}: Helm's record {ours.name} says "
            f"{ours.status or 'no status'!r}, not {HELM_UNINSTALLING!r}; either a render of the "
            "chart was applied beside a live Helm release of the same name, or Helm is "
            "uninstalling a release whose current revision is a rollback (it runs the hooks of "
            "the revision rolled back to); nothing was changed",
            fix=(
                "a render applied as plain objects: render without hooks (--set "
                "hooks.enabled=false, or helm template --no-hooks). A helm uninstall after a "
                f"rollback: `helm rollback {release} <its latest revision>` (same manifests), "
                f"`helm upgrade {release} <chart> --reuse-values` (hooks of a new revision), "
                f"then `helm uninstall {release}` again; or uninstall.requireOwner=false "
                "(docs/upgrade.md)"
            ),
        )
    return Finding(
        Severity.WARN,
        "not an uninstall: no Helm release record of this revision, and this Job was not "
        "created by Argo CD; a rendered chart applied as plain objects ran it, so it changes "
        "nothing",
        fix=(
            "render without hooks (--set hooks.enabled=false; migration then runs as an ordinary "
            "Job) or with helm template --no-hooks; to clean up for real, helm uninstall or "
            "delete the Argo CD Application (docs/upgrade.md)"
        ),
    )


SHOWN_PODS = 5


def remaining_pods(pods: list[dict[str, Any]]) -> str:
    """The pods a stop left, for the hook's log: name, node, and whether they terminate."""
    shown = []
    for pod in pods[:SHOWN_PODS]:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        state = (
            f"terminating since {meta['deletionTimestamp']}"
            if meta.get("deletionTimestamp")
            else f"{(pod.get('status') or {}).get('phase', 'Unknown')}, not deleted"
        )
        finalizers = meta.get("finalizers") or []
        held = f", finalizers {finalizers}" if finalizers else ""
        shown.append(f"{meta['name']} on {spec.get('nodeName') or 'no node'} ({state}{held})")
    more = f" and {len(pods) - SHOWN_PODS} more" if len(pods) > SHOWN_PODS else ""
    return f"{len(pods)} pod(s): " + "; ".join(shown) + more
