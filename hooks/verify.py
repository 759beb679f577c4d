"""``computedomains hooks verify``: whether the release works, and what the fabric looks like.

Helm runs it after install and upgrade (Argo CD: PostSync). It waits, up to
``--timeout-seconds``, until node-init has judged every GPU node and every component is ready,
then prints the NVLink fabric per rack and one line per check. What the lines say is decided
in :mod:`computedomains.hooks.fabricreport`; ``--failure-policy Warn`` reports failures
without failing the release.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from computedomains import flaggroups, flags
from computedomains.api import constants, resources

from . import client, fabricreport, kubeio, ownership, report, rollagents
from .fabricreport import Component, NodeFabric, PodVersion
from .report import Finding, Report, Severity

HOOK = "verify"
POLL_SECONDS = 2.0
"""Between two looks at the nodes and components while waiting."""
PROBE_NAME = "compute-domains-verify-probe"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.ReleaseConnection):
    """The release, the wait bound and the failure policy (rendered by the chart)."""

    timeout_seconds: float = flags.field(flaggroups.TIMEOUT_SECONDS, default="300")
    failure_policy: str = flags.option(
        "--failure-policy",
        default="Fail",
        choices=("Fail", "Warn"),
        help="Fail: exit non-zero on a failed check; Warn: only print it",
    )
    app_version: str = flags.option(
        "--app-version",
        default="",
        help="this chart's appVersion: pods of an OnDelete DaemonSet may run it or the one before",
    )
    gpu_node_selector: str = flags.field(flaggroups.GPU_NODE_SELECTOR)


STOP = report.NEVER
"""A refused check is one of verify's findings, under its failure policy."""


def run(api: kubeio.Api, args: Settings, report: Report) -> int:
    """Wait (bounded), print the fabric and the checks; 1 on a failure under policy Fail."""
    try:
        findings = _verify(api, args, report)
    except kubeio.ApiError as exc:
        findings = [
            Finding(
                Severity.FAIL,
                f"the API server refused a check: {exc}",
                fix="check the verify hook's RBAC (templates/hook-verify.yaml), then retry",
            )
        ]
    if report.findings(fabricreport.apply_policy(findings, args.failure_policy)):
        report.step("failed: fix the failures above (verify.failurePolicy=Warn only reports them)")
        return 1
    report.step("passed")
    return 0


def _verify(api: kubeio.Api, args: Settings, report: Report) -> list[Finding]:
    selector = (
        f"{ownership.NAME_LABEL}={ownership.CHART_NAME},{ownership.INSTANCE_LABEL}={args.release}"
    )
    started = time.monotonic()
    deadline = started + args.timeout_seconds
    report.step(
        f"waiting up to {args.timeout_seconds:g}s for node-init's verdicts and the components"
    )
    while True:
        nodes = _nodes(api, args.gpu_node_selector, args.namespace, selector)
        components = _components(api, args.namespace, selector)
        pending = fabricreport.unjudged(nodes)
        unready = [c.name for c in components if not c.settled]
        if (not pending and not unready and components) or time.monotonic() >= deadline:
            break
        report.step(
            f"waiting: {len(pending)} node(s) without a verdict, not ready: "
            f"{', '.join(unready) or '-'}"
        )
        time.sleep(POLL_SECONDS)
    for line in fabricreport.fabric_lines(nodes):
        report.step(line)
    findings = [fabricreport.check_verdicts(nodes, waited=time.monotonic() - started)]
    findings += fabricreport.check_components(
        components, current=args.app_version, roll_hint=roll_hint(args.namespace, args.release)
    )
    findings += fabricreport.check_crds(
        {
            name: _established(api.get_or_none(resources.CRDS.path(name)))
            for name in ownership.CRD_NAMES
        }
    )
    findings += fabricreport.check_device_classes(
        {
            n: api.get_or_none(resources.DEVICE_CLASSES.path(n)) is not None
            for n in ownership.DEVICE_CLASS_NAMES
        }
    )
    findings.append(fabricreport.check_dry_run(_dry_run(api, args.namespace)))
    return findings


def _nodes(api: kubeio.Api, gpu_selector: str, namespace: str, selector: str) -> list[NodeFabric]:
    plugin_selector = f"{selector},{constants.COMPONENT_LABEL}=kubelet-plugin"
    initialized = {
        str(p["spec"].get("nodeName")): any(
            c.get("type") == "Initialized" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
        for p in api.list_items(
            resources.PODS.path(namespace=namespace), label_selector=plugin_selector
        )
    }
    found = []
    for node in api.list_items(resources.NODES.path(), label_selector=gpu_selector):
        name = kubeio.name(node)
        condition = kubeio.condition(node, constants.FABRIC_CONDITION) or {}
        found.append(
            NodeFabric(
                name=name,
                clique=kubeio.labels(node).get(constants.CLIQUE_LABEL, ""),
                status=condition.get("status"),
                reason=str(condition.get("reason", "")),
                message=str(condition.get("message", "")),
                initialized=initialized.get(name, False),
            )
        )
    return found


def roll_hint(namespace: str, release: str) -> str:
    """How to replace the agents of idle nodes after an upgrade (docs/upgrade.md)."""
    return (
        f"helm upgrade {release} <chart> -n {namespace} --reuse-values (its post-upgrade hook "
        "replaces the agents of nodes no ComputeDomain holds, one clique at a time)"
    )


def _previous_pods(api: kubeio.Api, ds: kubeio.Obj) -> tuple[PodVersion, ...]:
    """The DaemonSet's pods on an older pod template: (node, version) each."""
    return tuple(
        PodVersion(node=p.node, version=p.version)
        for p in sorted(rollagents.agent_pods(api, ds), key=lambda p: p.node)
        if p.outdated
    )


def _components(api: kubeio.Api, namespace: str, selector: str) -> Sequence[Component]:
    found = []
    for ds in api.list_items(
        resources.DAEMON_SETS.path(namespace=namespace), label_selector=selector
    ):
        status = ds.get("status") or {}
        strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type")
        on_delete = strategy == "OnDelete"
        found.append(
            Component(
                "DaemonSet",
                kubeio.name(ds),
                wanted=int(status.get("desiredNumberScheduled", 0)),
                ready=int(status.get("numberReady", 0)),
                updated=int(status.get("updatedNumberScheduled", 0)),
                on_delete=on_delete,
                previous=_previous_pods(api, ds) if on_delete else (),
            )
        )
    for d in api.list_items(
        resources.DEPLOYMENTS.path(namespace=namespace), label_selector=selector
    ):
        status = d.get("status") or {}
        found.append(
            Component(
                "Deployment",
                kubeio.name(d),
                wanted=int((d.get("spec") or {}).get("replicas", 1)),
                ready=int(status.get("readyReplicas", 0)),
                updated=int(status.get("updatedReplicas", 0)),
            )
        )
    return found


def _established(crd: kubeio.Obj | None) -> bool | None:
    if crd is None:
        return None
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


def _dry_run(api: kubeio.Api, namespace: str) -> str:
    body = {
        "apiVersion": constants.API_VERSION_V1BETA2,
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {"channel": {"resourceClaimTemplate": {"name": PROBE_NAME}}},
    }
    path = (
        f"/apis/{constants.API_VERSION_V1BETA2}/namespaces/{namespace}/"
        f"{constants.COMPUTE_DOMAIN_PLURAL}"
    )
    try:
        api.create(path, body, dry_run=True)
    except kubeio.ApiError as exc:
        return str(exc)
    return ""
