"""Roll-agents' decisions: which outdated IMEX agent pods may be replaced now, clique by clique.

The agent DaemonSet's ``OnDelete`` strategy keeps a running agent, and the IMEX daemon it
supervises, until its pod is deleted: replacing it breaks the jobs of the ComputeDomain on
that node. A pod may go only where no domain holds the node (``api/placement.occupant``: no
membership record, no domain label, no slot left in a clique object). Pure:
:mod:`computedomains.hooks.rollagents` reads the facts and acts
(``tests/unit/test_hooks_roll_agents.py``).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class AgentPod:
    """One pod of the agent DaemonSet."""

    name: str
    uid: str
    node: str
    outdated: bool
    """Made from an older pod template than the DaemonSet's."""
    version: str = ""
    """Its ``app.kubernetes.io/version``."""


@dataclasses.dataclass(frozen=True)
class NodeHold:
    """What a node is to the ComputeDomains."""

    node: str
    clique: str
    """``nvidia.com/gpu.clique`` ("" when none)."""
    holder: str = ""
    """The domain holding it (``api/placement.occupant``: its record, its label or a slot
    left); "" when it is idle."""
    ready: bool = True
    """The Node is Ready: elsewhere a deleted agent pod could not be replaced."""


@dataclasses.dataclass(frozen=True)
class Wave:
    """The outdated agent pods of one clique's idle nodes: deleted together."""

    clique: str
    pods: tuple[AgentPod, ...]


@dataclasses.dataclass(frozen=True)
class RollPlan:
    """What one run does, and what it leaves."""

    waves: tuple[Wave, ...]
    held: tuple[tuple[AgentPod, str], ...]
    """Outdated pods on nodes a domain holds, with that domain: left running."""
    unready: tuple[AgentPod, ...]
    """Outdated pods on idle nodes that are not Ready: left for later."""
    current: int
    """Pods already on the current template."""

    @property
    def outdated(self) -> int:
        """Outdated pods, rolled now or left."""
        return sum(len(w.pods) for w in self.waves) + len(self.held) + len(self.unready)


def plan(pods: Sequence[AgentPod], holds: Mapping[str, NodeHold]) -> RollPlan:
    """One wave per clique of the outdated pods on idle nodes, cliques in name order.

    A pod whose node is unknown (deleted meanwhile) is left alone: its DaemonSet removes it.
    """
    by_clique: dict[str, list[AgentPod]] = collections.defaultdict(list)
    held: list[tuple[AgentPod, str]] = []
    unready: list[AgentPod] = []
    current = 0
    for pod in sorted(pods, key=lambda p: p.node):
        if not pod.outdated:
            current += 1
            continue
        hold = holds.get(pod.node)
        if hold is None:
            continue
        if hold.holder:
            held.append((pod, hold.holder))
        elif not hold.ready:
            unready.append(pod)
        else:
            by_clique[hold.clique].append(pod)
    waves = tuple(Wave(clique, tuple(by_clique[clique])) for clique in sorted(by_clique))
    return RollPlan(waves=waves, held=tuple(held), unready=tuple(unready), current=current)


def still_idle(pod: AgentPod, holds: Mapping[str, NodeHold]) -> bool:
    """Whether ``pod``'s node is still idle and Ready on a fresh look, just before its wave."""
    hold = holds.get(pod.node)
    return hold is not None and not hold.holder and hold.ready
