"""``computedomains hooks roll-agents``: new IMEX agents on the nodes no ComputeDomain holds.

The agent DaemonSet's ``OnDelete`` strategy leaves every agent of the previous version running
after an upgrade, since replacing one restarts IMEX under the jobs on its node. This program
replaces those that can go now: it deletes the outdated agent pods on idle nodes, one clique at
a time, and waits for the DaemonSet's new pods there to be Ready before the next clique; a node
that a domain takes meanwhile is skipped. Nodes that domains hold keep their agent and are
listed; run it again once their jobs ended (it is the chart's post-upgrade hook, so
``helm upgrade --reuse-values`` does). The decisions are :mod:`rollplan`'s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from computedomains import flaggroups, flags
from computedomains.api import constants, placement, resources
from computedomains.kube import pods as kube_pods

from . import client, daemonsetpods, kubeio, rollplan
from .report import Finding, Report, Severity, Stop

HOOK = "roll-agents"
POLL_SECONDS = 2.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.Connection):
    """The agent DaemonSet, the wait per clique, and a dry run."""

    agent_daemonset: str = flags.field(flaggroups.AGENT_DAEMONSET, required=True)
    timeout_seconds: float = flags.field(flaggroups.TIMEOUT_SECONDS, default="240")
    dry_run: bool = flags.switch("--dry-run", help="print the plan, delete nothing")


STOP = Stop(
    (kubeio.ApiError,),
    "rolling stopped",
    "fix the cause and run it again: it only replaces what is still outdated",
)


def run(api: kubeio.Api, args: Settings, report: Report) -> int:
    """Roll what may go; 0 unless the API server refused.

    What is left is reported; verify judges the agents' readiness.
    """
    path = resources.DAEMON_SETS.path(args.agent_daemonset, namespace=args.namespace)
    ds = api.get_or_none(path)
    if ds is None:
        report.step(f"DaemonSet {args.namespace}/{args.agent_daemonset} not found: nothing to roll")
        return 0
    deadline = time.monotonic() + args.timeout_seconds
    pods = agent_pods(api, ds)
    the_plan = rollplan.plan(pods, _holds(api, args.namespace, {p.node for p in pods}))
    report.step(
        f"{len(pods)} agent pod(s): {the_plan.current} current, {the_plan.outdated} outdated; "
        f"{sum(len(w.pods) for w in the_plan.waves)} on idle nodes in "
        f"{len(the_plan.waves)} clique(s), {len(the_plan.held)} on nodes a domain holds"
    )
    _describe(the_plan, report, dry_run=args.dry_run)
    if args.dry_run:
        return 0
    for wave in the_plan.waves:
        left = _roll_wave(api, args, ds, wave, deadline=deadline, report=report)
        if left:
            report.finding(Finding(
                Severity.WARN,
                f"no Ready agent of the current version on {', '.join(left)} before the "
                "deadline: not rolling further cliques",
                fix=f"kubectl -n {args.namespace} describe pods -l "
                f"{daemonsetpods.match_labels(ds)} on those nodes; run this again once they are "
                "Ready (verify names them)",
            ))  # fmt: skip
            return 0
    if the_plan.held or the_plan.unready:
        report.step(
            f"done; {len(the_plan.held) + len(the_plan.unready)} node(s) keep the previous agent "
            "for now: run this again once their domains ended (helm upgrade --reuse-values "
            "runs it)"
        )
    else:
        report.step("done: every agent runs the current version")
    return 0


def _describe(the_plan: rollplan.RollPlan, report: Report, *, dry_run: bool) -> None:
    for pod, domain in the_plan.held:
        report.step(f"kept: {pod.node} (version {pod.version or '?'}): domain {domain} holds it")
    for pod in the_plan.unready:
        report.step(f"kept: {pod.node}: the node is not Ready")
    if dry_run:
        for wave in the_plan.waves:
            report.step(f"would roll clique {wave.clique or '-'}: "
                        f"{', '.join(p.node for p in wave.pods)}")  # fmt: skip


def _roll_wave(
    api: kubeio.Api,
    args: Settings,
    ds: kubeio.Obj,
    wave: rollplan.Wave,
    *,
    deadline: float,
    report: Report,
) -> list[str]:
    """Replace one clique's idle agents; the nodes still without a new one at ``deadline``."""
    holds = _holds(api, args.namespace, {p.node for p in wave.pods})
    going = [p for p in wave.pods if rollplan.still_idle(p, holds)]
    for pod in wave.pods:
        if pod not in going:
            report.step(f"kept: {pod.node}: a domain took it meanwhile, or it is not Ready")
    if not going:
        return []
    report.step(f"clique {wave.clique or '-'}: replacing the agents of "
                f"{', '.join(p.node for p in going)}")  # fmt: skip
    for pod in going:
        try:
            api.delete(resources.PODS.path(pod.name, namespace=args.namespace), uid=pod.uid)
        except kubeio.Conflict:
            report.step(f"kept: {pod.node}: its agent pod was replaced meanwhile")
    return _wait_current(api, args, ds, {p.node for p in going}, deadline=deadline, report=report)


def agent_pods(api: kubeio.Api, ds: kubeio.Obj) -> list[rollplan.AgentPod]:
    """The DaemonSet's pods (not terminating), each marked outdated or current."""
    namespace = str(ds["metadata"]["namespace"])
    listed = [
        pod
        for pod in api.list_items(
            resources.PODS.path(namespace=namespace), label_selector=daemonsetpods.match_labels(ds)
        )
        if not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    current = daemonsetpods.current_pods(listed, ds)
    return [
        rollplan.AgentPod(
            name=kubeio.name(pod),
            uid=str(pod["metadata"].get("uid", "")),
            node=str((pod.get("spec") or {}).get("nodeName") or ""),
            outdated=str(pod["metadata"].get("uid", "")) not in current,
            version=kubeio.labels(pod).get(daemonsetpods.VERSION_LABEL, ""),
        )
        for pod in listed
    ]


def _holds(api: kubeio.Api, namespace: str, nodes: set[str]) -> Mapping[str, rollplan.NodeHold]:
    objects = []  # (domain UID, clique ID, object) of every clique object
    for obj in api.list_items(resources.CLIQUES.path(namespace=namespace)):
        domain, _, clique = kubeio.name(obj).partition(".")
        objects.append((domain, clique, obj))
    holds = {}
    for node in api.list_items(resources.NODES.path()):
        name = kubeio.name(node)
        if name not in nodes:
            continue
        labels = kubeio.labels(node)
        clique = labels.get(constants.CLIQUE_LABEL, "")
        holder = placement.occupant(
            name,
            {uid: obj for uid, of, obj in objects if of == clique},
            label=labels.get(constants.COMPUTE_DOMAIN_LABEL, ""),
            everywhere=[(uid, obj) for uid, _, obj in objects],
        )
        holds[name] = rollplan.NodeHold(
            node=name, clique=clique, holder=holder, ready=kube_pods.is_ready(node)
        )
    return holds


def _wait_current(
    api: kubeio.Api,
    args: Settings,
    ds: kubeio.Obj,
    nodes: set[str],
    *,
    deadline: float,
    report: Report,
) -> list[str]:
    """Until each of ``nodes`` has a Ready agent on the current template.

    Returns the nodes still without one at ``deadline``; an API error counts as "not yet".
    """
    waiting_for = sorted(nodes)
    while True:
        try:
            fresh = api.get(
                resources.DAEMON_SETS.path(args.agent_daemonset, namespace=args.namespace)
            )
            listed = list(api.list_items(
                resources.PODS.path(namespace=args.namespace),
                label_selector=daemonsetpods.match_labels(ds),
            ))  # fmt: skip
        except kubeio.ApiError as exc:
            report.step(f"looking at the new agents: {exc} (trying again)")
        else:
            current = daemonsetpods.current_pods(listed, fresh)
            done = {
                str((p.get("spec") or {}).get("nodeName"))
                for p in listed
                if str(p["metadata"].get("uid")) in current and kube_pods.is_ready(p)
            }
            waiting_for = sorted(nodes - done)
            if not waiting_for:
                report.step(f"ready: {', '.join(sorted(nodes))}")
                return []
        if time.monotonic() >= deadline:
            return waiting_for
        report.step(f"waiting for the new agents on {', '.join(waiting_for)}")
        time.sleep(POLL_SECONDS)
