"""What the controller's caches index objects by, and the labels they read.

Each index function gives the keys one cached object is found under
(``Informer(indexes=...)``): one reconcile reads its domain's nodes, agents, cliques and
claims, not the whole cluster's.
"""

from __future__ import annotations

from typing import Any

from computedomains.api import constants, models, placement


def label(obj: dict[str, Any], key: str = constants.COMPUTE_DOMAIN_LABEL) -> str:
    """The value of ``obj``'s label ``key`` ("" absent); the domain label by default."""
    return str((obj.get("metadata", {}).get("labels") or {}).get(key, ""))


def name(obj: dict[str, Any]) -> tuple[str, ...]:
    """An object by its name (a Node)."""
    return (str(obj["metadata"].get("name", "")),)


def domain_label(obj: dict[str, Any]) -> tuple[str, ...]:
    """An object by the domain its label names (none without the label)."""
    value = label(obj)
    return (value,) if value else ()


def pod_node(pod: dict[str, Any]) -> tuple[str, ...]:
    """A pod by the node it runs on (none before it is scheduled)."""
    node = pod.get("spec", {}).get("nodeName", "")
    return (str(node),) if node else ()


def listed_nodes(clique: dict[str, Any]) -> tuple[str, ...]:
    """A clique object by every node it lists a daemon for."""
    return tuple(str(d.get("nodeName", "")) for d in clique.get("daemons") or [])


def claim_domain(claim: dict[str, Any]) -> tuple[str, ...]:
    """A claim by the domain of its channel allocation (none without one)."""
    allocation = placement.parse_claim(claim)
    return (allocation.domain_uid,) if allocation is not None else ()


def claim_node(claim: dict[str, Any]) -> tuple[str, ...]:
    """A claim by the node of its channel allocation (none without one)."""
    allocation = placement.parse_claim(claim)
    return (allocation.node,) if allocation is not None else ()


def named_nodes(clique: dict[str, Any]) -> tuple[str, ...]:
    """A clique object by every member it names (the record), sorted."""
    return tuple(sorted(models.clique_members(clique) or ()))
