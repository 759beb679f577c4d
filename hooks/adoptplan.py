"""Which of an incumbent install's per-domain objects may be retired now, and what to wait for.

The incumbent driver runs, per ComputeDomain, a DaemonSet ``computedomain-daemon-<uid>`` and a
daemon ResourceClaimTemplate of the same name in its namespace, both labelled
``resource.nvidia.com/computeDomain=<uid>``; its kubelet plugin labels each member node with
the same label. Its daemons keep a domain's IMEX running, so they may go only once our IMEX
agent serves every node of that domain: the agent's pod on the node reports IMEXReady True
for the domain, written by the agent run that is running now (:mod:`computedomains.api.imex`,
the very test the controller applies). A domain no node serves has nothing to hand over.
Objects of a domain that no longer exists are the incumbent's leftovers: retired at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from computedomains.api import constants, domainview, imex


@dataclasses.dataclass(frozen=True)
class Adoptee:
    """A ComputeDomain and the nodes the incumbent serves it on."""

    domain: domainview.Domain
    nodes: frozenset[str]
    """Existing nodes labelled with the domain, or listed in its (incumbent) status."""

    @property
    def uid(self) -> str:
        """The domain's UID."""
        return self.domain.uid

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return self.domain.key


@dataclasses.dataclass(frozen=True)
class Incumbent:
    """One incumbent per-domain object (a DaemonSet or a daemon claim template)."""

    kind: str
    name: str
    uid: str
    """The domain it serves (its label's value)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """The decisions of one round."""

    retire: tuple[Incumbent, ...]
    waiting: Mapping[str, tuple[str, ...]]
    """Domain key → nodes our agent does not serve yet (only domains with incumbent objects)."""
    adopted: tuple[str, ...]
    """Domain keys whose incumbent objects are gone or retired now."""

    @property
    def done(self) -> bool:
        """Nothing left to wait for."""
        return not self.waiting


def domains(cds: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> list[Adoptee]:
    """The domains of ComputeDomain objects, with their incumbent-served nodes."""
    existing: dict[str, str] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        existing[str(meta.get("name"))] = str(
            (meta.get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL, "")
        )
    found = []
    for cd in cds:
        domain = domainview.Domain.peek(cd)
        listed = {str(n.get("name")) for n in (cd.get("status") or {}).get("nodes") or []}
        labelled = {name for name, value in existing.items() if value == domain.uid}
        found.append(Adoptee(domain, frozenset((listed & existing.keys()) | labelled)))
    return found


def incumbents(kind: str, objects: Iterable[Mapping[str, Any]]) -> list[Incumbent]:
    """The incumbent's per-domain objects among ``objects`` (those with a domain label)."""
    out = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL)
        if uid:
            out.append(Incumbent(kind=kind, name=str(meta.get("name")), uid=str(uid)))
    return out


def served(agent_pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node → the domain our (live) agent's IMEX is READY for there, by the current run."""
    out: dict[str, str] = {}
    for pod in agent_pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        report = imex.pod_report(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if report is None or not node or not report.ready or not report.domain_uid:
            continue
        if imex.current(report, since=imex.running_since(pod)):
            out[str(node)] = report.domain_uid
    return out


def plan(
    domains_: Sequence[Adoptee], objects: Sequence[Incumbent], serving: Mapping[str, str]
) -> Plan:
    """What to retire now and what to keep waiting for."""
    by_uid = {d.uid: d for d in domains_}
    retire: list[Incumbent] = []
    waiting: dict[str, tuple[str, ...]] = {}
    adopted: list[str] = []
    for uid in sorted({o.uid for o in objects}):
        mine = [o for o in objects if o.uid == uid]
        domain = by_uid.get(uid)
        if domain is None:
            retire.extend(mine)
            continue
        pending = tuple(sorted(n for n in domain.nodes if serving.get(n) != uid))
        if pending:
            waiting[domain.key] = pending
        else:
            retire.extend(mine)
            adopted.append(domain.key)
    incumbent_uids = {o.uid for o in objects}
    adopted.extend(d.key for d in domains_ if d.uid not in incumbent_uids)
    return Plan(retire=tuple(retire), waiting=waiting, adopted=tuple(sorted(adopted)))
