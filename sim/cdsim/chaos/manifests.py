"""The objects a chaos run creates: tenant namespaces, ComputeDomains, their pods (pure)."""

from __future__ import annotations

from typing import Any

from cdsim.chaos.schedule import Layout, Shape
from computedomains.api import constants

RUN_LABEL = "chaos.compute-domains.sim/run"
"""On every namespace, domain and pod of a run: the run's tag."""
DOMAIN_LABEL = "chaos.compute-domains.sim/domain"
"""On a workload pod: its domain's name."""
HOSTNAME = "kubernetes.io/hostname"
POD_GRACE_SECONDS = 5
EVICTION_SECONDS = 300
"""How long a workload pod stays on a NotReady node (the Kubernetes default)."""


def namespace_name(run: str, tenant: int) -> str:
    """The namespace of tenant ``tenant`` of run ``run``."""
    return f"chaos-{run}-t{tenant}"


def namespace(run: str, tenant: int) -> dict[str, Any]:
    """A tenant's namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace_name(run, tenant), "labels": {RUN_LABEL: run}},
    }


def template_name(domain: str) -> str:
    """The ResourceClaimTemplate the controller makes for ``domain``, which its pods claim."""
    return f"{domain}-channel"


def domain(run: str, name: str, shape: Shape) -> dict[str, Any]:
    """A v1beta2 ComputeDomain with the shape's clique placement."""
    return {
        "apiVersion": f"{constants.GROUP}/{constants.STORAGE_VERSION}",
        "kind": constants.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "labels": {RUN_LABEL: run}},
        "spec": {
            "channel": {"resourceClaimTemplate": {"name": template_name(name)}},
            "placement": {"clique": shape.clique},
        },
    }


def pod_name(domain_name: str, index: int) -> str:
    """The ``index``-th pod of a domain (indices only grow: a name is never used twice)."""
    return f"{domain_name}-p{index}"


def pod(run: str, domain_name: str, index: int, layout: Layout) -> dict[str, Any]:
    """A workload pod of a domain: claims its channel; spread or packed with its siblings.

    The webhook adds the domain's own placement (clique affinity, spread from other domains);
    the pod's affinity here only says how the domain's pods share nodes: a spread domain's
    never share one, a packed domain's all share the first one's.
    """
    term = {
        "labelSelector": {"matchLabels": {RUN_LABEL: run, DOMAIN_LABEL: domain_name}},
        "topologyKey": HOSTNAME,
    }
    kind = "podAntiAffinity" if layout is Layout.SPREAD else "podAffinity"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(domain_name, index),
            "labels": {RUN_LABEL: run, DOMAIN_LABEL: domain_name},
        },
        "spec": {
            "resourceClaims": [
                {"name": "imex", "resourceClaimTemplateName": template_name(domain_name)}
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.37",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "imex"}]},
                }
            ],
            "affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
            # What the API server's DefaultTolerationSeconds admission adds, said here so the
            # run does not depend on it: a node NotReady for a minute evicts nothing.
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": EVICTION_SECONDS,
                }
                for taint in ("not-ready", "unreachable")
            ],
            "terminationGracePeriodSeconds": POD_GRACE_SECONDS,
        },
    }
