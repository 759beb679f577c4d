"""Clique placement at pod admission (pure): the label and pod affinity a domain's pods get.

A pod that claims the channel template of a v1beta2 ComputeDomain (same namespace) whose
``spec.placement.clique`` is ``Required`` or ``Preferred`` gets the label
``computedomains.io/domain: <domain UID>`` and a pod affinity term on that label with
topology key ``nvidia.com/gpu.clique``: required or preferred (weight 100). The scheduler
then puts the domain's later pods into the clique of its first pods; the first pod matches
its own term, which the scheduler accepts when no other pod does (docs/webhook.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from computedomains.api import constants, models
from computedomains.webhook import domains, review

DOMAIN_LABEL = f"{constants.OWN_PREFIX}/domain"
"""On a pod: the UID of the ComputeDomain whose placement it follows."""
PREFERRED_WEIGHT = 100


def claimed_templates(pod: Mapping[str, Any]) -> set[str]:
    """The ResourceClaimTemplate names a pod's ``spec.resourceClaims`` refer to."""
    claims = (pod.get("spec") or {}).get("resourceClaims") or []
    return {
        str(c["resourceClaimTemplateName"]) for c in claims if c.get("resourceClaimTemplateName")
    }


def affinity_term(uid: str) -> dict[str, Any]:
    """The pod affinity term that keeps a domain's pods in one clique."""
    return {
        "labelSelector": {"matchLabels": {DOMAIN_LABEL: uid}},
        "topologyKey": constants.CLIQUE_LABEL,
    }


def _pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) of ``parts``."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def place(request: dict[str, Any], known: Iterable[domains.Domain]) -> review.Verdict:
    """The mutation of a pod CREATE: the patch for its domain's placement, if it has one."""
    pod = request.get("object") or {}
    namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")
    templates = claimed_templates(pod)
    if not templates:
        return review.Verdict()
    placed = [
        d
        for d in domains.in_namespace(known, namespace)
        if d.template in templates and d.clique is not models.CliquePlacement.NONE
    ]
    if not placed:
        return review.Verdict()
    if len(placed) > 1:
        names = ", ".join(d.name for d in placed)
        return review.Verdict(
            warnings=(
                f"the pod claims channels of several ComputeDomains with a clique "
                f"placement ({names}): no placement was added",
            )
        )
    return review.Verdict(patch=patch(pod, placed[0]))


def patch(pod: Mapping[str, Any], domain: domains.Domain) -> list[dict[str, Any]]:
    """JSONPatch operations adding the label and the affinity term that ``pod`` lacks."""
    ops: list[dict[str, Any]] = []
    labels = (pod.get("metadata") or {}).get("labels")
    if labels is None:
        ops.append({"op": "add", "path": "/metadata/labels", "value": {DOMAIN_LABEL: domain.uid}})
    elif labels.get(DOMAIN_LABEL) != domain.uid:
        ops.append({"op": "add", "path": _pointer("metadata", "labels", DOMAIN_LABEL),
                    "value": domain.uid})  # fmt: skip
    term = affinity_term(domain.uid)
    if domain.clique is models.CliquePlacement.REQUIRED:
        field, entry = "requiredDuringSchedulingIgnoredDuringExecution", term
    else:
        field = "preferredDuringSchedulingIgnoredDuringExecution"
        entry = {"weight": PREFERRED_WEIGHT, "podAffinityTerm": term}
    affinity = (pod.get("spec") or {}).get("affinity")
    pod_affinity = (affinity or {}).get("podAffinity")
    existing = (pod_affinity or {}).get(field)
    if existing is not None and entry in existing:
        return ops
    if affinity is None:
        ops.append({"op": "add", "path": "/spec/affinity",
                    "value": {"podAffinity": {field: [entry]}}})  # fmt: skip
    elif pod_affinity is None:
        ops.append({"op": "add", "path": "/spec/affinity/podAffinity", "value": {field: [entry]}})
    elif existing is None:
        ops.append({"op": "add", "path": _pointer("spec", "affinity", "podAffinity", field),
                    "value": [entry]})  # fmt: skip
    else:
        ops.append({"op": "add", "path": _pointer("spec", "affinity", "podAffinity", field, "-"),
                    "value": entry})  # fmt: skip
    return ops
