"""Placement at pod admission (pure): the label and pod (anti-)affinity a domain's pods get.

A pod that claims the channel template of one v1beta2 ComputeDomain (same namespace) gets the
label ``computedomains.io/domain: <domain UID>`` and:

- with ``spread`` (``--spread-domains``, on by default), a required pod anti-affinity (per
  node, every namespace) against pods of other domains. A node another domain holds is
  tainted anyway; this keeps domains apart where nothing else can: several domains placing at
  once, whose claims the scheduler would otherwise allocate on the same free node (it knows
  its own pods in flight, but not our one-domain-per-node rule), so that all but one lose the
  race and wait another PreBind poll (docs/placement.md). Required, because the scheduler
  counts the pods it has just placed and not yet bound: two domains' pods then never share a
  node, which is our rule anyway, so the term never keeps a pod from a node it could use;
- with ``spec.placement.clique`` ``Required`` or ``Preferred``, a pod affinity term on the
  label with topology key ``nvidia.com/gpu.clique``: required or preferred (weight 100). The
  scheduler then puts the domain's later pods into the clique of its first pods; the first
  pod matches its own term, which the scheduler accepts when no other pod does
  (docs/webhook.md).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from computedomains.api import constants, domainview, models
from computedomains.webhook import review

DOMAIN_LABEL = f"{constants.OWN_PREFIX}/domain"
"""On a pod: the UID of the ComputeDomain whose placement it follows."""
PREFERRED_WEIGHT = 100
HOSTNAME_LABEL = "kubernetes.io/hostname"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


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


def spread_term(uid: str) -> dict[str, Any]:
    """The anti-affinity term that keeps pods of other domains off a pod's node.

    Every namespace's: a term without a namespace selector sees only the pod's own namespace.
    """
    others = [
        {"key": DOMAIN_LABEL, "operator": "Exists"},
        {"key": DOMAIN_LABEL, "operator": "NotIn", "values": [uid]},
    ]
    return {
        "labelSelector": {"matchExpressions": others},
        "namespaceSelector": {},
        "topologyKey": HOSTNAME_LABEL,
    }


def claimed_domains(
    request: Mapping[str, Any], known: Iterable[domainview.Domain]
) -> list[domainview.Domain]:
    """The live domains of the pod's namespace whose channel templates the pod claims."""
    pod = request.get("object") or {}
    namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "")
    templates = claimed_templates(pod)
    live = [d for d in domainview.in_namespace(known, namespace) if not d.deleting]
    return [d for d in live if d.template in templates]


def place(
    request: dict[str, Any], known: Iterable[domainview.Domain], *, spread: bool = False
) -> review.Verdict:
    """The mutation of a pod CREATE: the patch for its domain's placement, if it has one.

    The domain label is the webhook's alone: a pod that carries it without claiming exactly
    one live domain's channel loses it (with a warning), since every domain's pods keep off
    the nodes of pods with another domain's label. A domain being deleted places nothing.
    """
    pod = request.get("object") or {}
    if not claimed_templates(pod):
        return review.Verdict()
    claimed = claimed_domains(request, known)
    placed = [d for d in claimed if d.clique is not models.CliquePlacement.NONE]
    if len(claimed) != 1:
        verdict = _unlabelled(pod)
        if len(claimed) > 1 and placed:
            names = ", ".join(d.name for d in placed)
            warning = (f"the pod claims channels of several ComputeDomains with a clique "
                       f"placement ({names}): no placement was added")  # fmt: skip
            return dataclasses.replace(verdict, warnings=(*verdict.warnings, warning))
        return verdict
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(DOMAIN_LABEL)
    if not placed and not spread and label in (None, claimed[0].uid):
        return review.Verdict()  # nothing to add, and no label of another domain to correct
    return review.Verdict(patch=patch(pod, claimed[0], spread=spread))


def _unlabelled(pod: Mapping[str, Any]) -> review.Verdict:
    """The removal of a domain label the pod carries though it claims no one domain's channel."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if DOMAIN_LABEL not in labels:
        return review.Verdict()
    remove = {"op": "remove", "path": _pointer("metadata", "labels", DOMAIN_LABEL)}
    warning = (f"removed the label {DOMAIN_LABEL}: only the webhook sets it, on a pod that "
               "claims the channel of exactly one ComputeDomain of its namespace")  # fmt: skip
    return review.Verdict(patch=[remove], warnings=(warning,))


def patch(
    pod: Mapping[str, Any], domain: domainview.Domain, *, spread: bool = False
) -> list[dict[str, Any]]:
    """JSONPatch operations adding the label and the affinity terms that ``pod`` lacks."""
    ops: list[dict[str, Any]] = []
    labels = (pod.get("metadata") or {}).get("labels")
    if labels is None:
        ops.append({"op": "add", "path": "/metadata/labels", "value": {DOMAIN_LABEL: domain.uid}})
    elif labels.get(DOMAIN_LABEL) != domain.uid:
        ops.append({"op": "add", "path": _pointer("metadata", "labels", DOMAIN_LABEL),
                    "value": domain.uid})  # fmt: skip
    wanted: list[tuple[str, str, dict[str, Any]]] = []
    term = affinity_term(domain.uid)
    if domain.clique is models.CliquePlacement.REQUIRED:
        wanted.append(("podAffinity", REQUIRED, term))
    elif domain.clique is models.CliquePlacement.PREFERRED:
        wanted.append(
            ("podAffinity", PREFERRED, {"weight": PREFERRED_WEIGHT, "podAffinityTerm": term})
        )
    if spread:
        wanted.append(("podAntiAffinity", REQUIRED, spread_term(domain.uid)))
    # The pod's affinity as the API server will see it after each operation.
    affinity = copy.deepcopy((pod.get("spec") or {}).get("affinity"))
    for kind, field, entry in wanted:
        op, affinity = _add_term(affinity, kind, field, entry)
        if op is not None:
            ops.append(op)
    return ops


def _add_term(
    affinity: dict[str, Any] | None, kind: str, field: str, entry: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The operation adding ``entry`` to ``affinity.kind.field``, and the affinity afterwards.

    The operation is None when the entry is there already; otherwise it adds at the deepest
    level that exists (an ``add`` needs its parent).
    """
    if affinity is None:
        value: Any = {kind: {field: [entry]}}
        return {"op": "add", "path": "/spec/affinity", "value": copy.deepcopy(value)}, value
    section = affinity.get(kind)
    if section is None:
        affinity[kind] = {field: [entry]}
        path, value = _pointer("spec", "affinity", kind), {field: [entry]}
    elif section.get(field) is None:
        section[field] = [entry]
        path, value = _pointer("spec", "affinity", kind, field), [entry]
    elif entry in section[field]:
        return None, affinity
    else:
        section[field].append(entry)
        path, value = _pointer("spec", "affinity", kind, field, "-"), entry
    return {"op": "add", "path": path, "value": copy.deepcopy(value)}, affinity
