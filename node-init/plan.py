"""What to change on the Node for a verdict: pure, from the verdict and the Node as it is.

Only what node-init owns is touched: the clique label, the fabric condition and the fabric
taint. A node without a fabric ends up with none of them, so nodes that never had an NVLink
fabric are left exactly as they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from computedomains.api import constants
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric.model import Reason, Verdict
from computedomains.kube.nodes import NodeView

TAINT_EFFECT = "NoSchedule"


@dataclasses.dataclass(frozen=True)
class ConditionUpdate:
    """The fabric condition to write."""

    status: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """Changes to make; each field empty/None/False when nothing is to be done there."""

    labels: Mapping[str, str | None]
    """Label changes; a None value removes the label."""
    condition: ConditionUpdate | None
    remove_condition: bool
    taint: bool | None
    """True: add the fabric taint, False: remove it, None: leave it."""

    def describe(self) -> list[str]:
        """One human-readable line per change."""
        lines = [
            f"label {k}={v}" if v is not None else f"remove label {k}"
            for k, v in self.labels.items()
        ]
        if self.condition is not None:
            c = self.condition
            lines.append(f"condition {constants.FABRIC_CONDITION}={c.status} ({c.reason})")
        if self.remove_condition:
            lines.append(f"remove condition {constants.FABRIC_CONDITION}")
        if self.taint is not None:
            verb = "taint" if self.taint else "remove taint"
            lines.append(f"{verb} {constants.FABRIC_TAINT}:{TAINT_EFFECT}")
        return lines


def plan(verdict: Verdict, node: NodeView, *, taint_broken: bool) -> Plan:
    """The changes that make ``node`` reflect ``verdict``."""
    wanted_label = verdict.clique or None
    labels = {}
    if node.labels.get(constants.CLIQUE_LABEL) != wanted_label:
        labels[constants.CLIQUE_LABEL] = wanted_label
    current = node.condition(constants.FABRIC_CONDITION)
    condition = None
    remove_condition = False
    if verdict.kind is VerdictKind.NO_FABRIC:
        remove_condition = current is not None
    else:
        wanted = ConditionUpdate(
            "True" if verdict.usable else "False", verdict.reason.value, verdict.message
        )
        if current is None or (current.status, current.reason, current.message) != (
            wanted.status,
            wanted.reason,
            wanted.message,
        ):
            condition = wanted
    return Plan(
        labels=labels,
        condition=condition,
        remove_condition=remove_condition,
        taint=_taint(verdict, node, taint_broken=taint_broken),
    )


def _taint(verdict: Verdict, node: NodeView, *, taint_broken: bool) -> bool | None:
    # When discovery itself failed nobody knows whether the node even has a fabric (a wrong
    # driver root fails every node alike), so that alone never keeps GPU work off a node.
    wanted = (
        taint_broken
        and verdict.kind is VerdictKind.BROKEN
        and verdict.reason is not Reason.DISCOVERY_FAILED
    )
    has = any(t.key == constants.FABRIC_TAINT and t.effect == TAINT_EFFECT for t in node.taints)
    return None if wanted == has else wanted
