"""Helm 4's default wait and the IMEX agents' ``OnDelete`` strategy: an upgrade that never ends.

Helm 4 waits with kstatus (``--wait``, and what ``--rollback-on-failure`` turns on): a DaemonSet
is ready once every node runs a pod of the new template. ``OnDelete`` agents never get one
before the post-upgrade ``roll-agents`` hook, which Helm runs only after that wait, and the
agents of nodes that ComputeDomains hold keep theirs until the jobs end: such an upgrade waits
until its ``--timeout`` and fails. Nothing the chart renders can change what kstatus counts
(it reads the oldest pod of each node), so preflight refuses it before anything is applied, and
the documented commands use Helm 4's ``--wait=legacy`` (Helm 3's wait, which skips ``OnDelete``
DaemonSets). The chart cannot see Helm's flags: the value ``preflight.helm4Wait`` says which
wait runs. Argo CD renders the chart as an install and judges ``OnDelete`` DaemonSets healthy:
not affected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .report import Finding, Severity

POD_TEMPLATE_ANNOTATION = "computedomains.io/pod-template"
"""On the agent DaemonSet: a digest of its pod template as rendered (the chart sets both it and
preflight's ``--agent-pod-template``)."""

WAITS = ("watcher", "legacy", "hookOnly")
"""Helm 4's ``--wait`` strategies (``--wait`` alone: watcher; no ``--wait``: hookOnly)."""


def helm_major(version: str) -> int | None:
    """The major version of ``.Capabilities.HelmVersion.Version`` (``v4.3.2`` → 4)."""
    found = re.fullmatch(r"v?(\d+)\..*", version.strip())
    return int(found.group(1)) if found else None


def replaced_agents(daemonset: Mapping[str, Any], *, pod_template: str) -> int:
    """The agent pods an upgrade to ``pod_template`` leaves on their old template.

    Every pod the live DaemonSet runs, unless its pod template stays the same (a
    ``--reuse-values`` upgrade that changes no value of the agents).
    """
    annotations = (daemonset.get("metadata") or {}).get("annotations") or {}
    status = daemonset.get("status") or {}
    if pod_template and annotations.get(POD_TEMPLATE_ANNOTATION) == pod_template:
        # Kstatus still counts the agents an earlier upgrade left on their old template.
        desired = int(status.get("desiredNumberScheduled") or 0)
        return max(0, desired - int(status.get("updatedNumberScheduled") or 0))
    return int(status.get("currentNumberScheduled") or 0)


def check(
    *, helm_version: str, upgrade: bool, strategy: str, wait: str, agents: int
) -> list[Finding]:
    """Whether this Helm would wait for ever on the IMEX agents; nothing when it cannot.

    ``agents``: pods the agent DaemonSet runs now (an upgrade replaces none of them itself).
    """
    if not upgrade or strategy != "OnDelete" or helm_major(helm_version) != 4 or agents == 0:
        return []
    if wait != "watcher":
        return [
            Finding(
                Severity.OK,
                f"Helm {helm_version} waits with --wait={wait} (preflight.helm4Wait): it does "
                "not wait for the OnDelete IMEX agents to be replaced",
            )
        ]
    return [
        Finding(
            Severity.FAIL,
            f"Helm {helm_version}'s default wait (--wait, or what --rollback-on-failure turns "
            f"on) waits until every IMEX agent runs the new version, and none of the {agents} "
            "agent(s) will (updateStrategy OnDelete: the roll-agents hook replaces the idle "
            "nodes' agents only after that wait, and nodes that ComputeDomains hold keep "
            "theirs): this upgrade would wait until its --timeout and fail",
            fix="run Helm 4 with --wait=legacy (Helm 3's wait, which skips OnDelete DaemonSets) "
            "and say so: --set preflight.helm4Wait=legacy (or --wait=hookOnly and "
            "preflight.helm4Wait=hookOnly); docs/upgrade.md",
        )
    ]
