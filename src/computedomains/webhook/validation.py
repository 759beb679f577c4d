"""Admission checks of ComputeDomains that the CRD schema cannot express (pure).

The schema sees one object at a time. What it cannot see: two ComputeDomains of one
namespace naming the same channel ResourceClaimTemplate. The controller would then own one
template for two domains, and the pods of both would join whichever domain the template
names. Such a create (or an update that renames the template) is refused, naming the other
domain. The check reads the webhook's cache, so two such creates within the same moment can
both pass; the controller reports the clash on the later domain then (docs/webhook.md).

Nor can it read the annotations reserved for conversion (``computedomains.io/num-nodes``,
``computedomains.io/placement``). One the conversion cannot read would be stored, and the object
would then fail every read at the other version (the controller's, kubectl's). So an object
that does not convert to the other served version is refused, naming the annotation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from computedomains.api import conversion, domainview, models
from computedomains.webhook import review


def validate(request: dict[str, Any], known: Iterable[domainview.Domain]) -> review.Verdict:
    """The verdict on a CREATE or UPDATE of a ComputeDomain, given the other domains."""
    obj = request.get("object") or {}
    meta = obj.get("metadata") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or request.get("name") or "")
    shown = name or f"{meta.get('generateName', '')}*"
    old = request.get("oldObject") or {}
    problem = _conversion_problem(obj) or _hidden_spec_change(obj, old)
    if problem:
        return review.Verdict(
            allowed=False, message=f"ComputeDomain {namespace}/{shown}: {problem}"
        )
    template = domainview.template_of(obj)
    if not template:
        return review.Verdict()  # the schema requires it; nothing for us to compare
    if old and domainview.template_of(old) == template:
        return review.Verdict()  # unchanged: a clash that exists already is not made worse
    clashes = [
        d
        for d in domainview.in_namespace(known, namespace)
        if d.template == template and d.name != name
    ]
    if not clashes:
        return review.Verdict()
    other = clashes[0]
    state = " (being deleted; wait until it is gone)" if other.deleting else ""
    return review.Verdict(
        allowed=False,
        message=(
            f"ComputeDomain {namespace}/{shown}: spec.channel.resourceClaimTemplate.name "
            f"{template!r} is already used by ComputeDomain {other.name!r} in this "
            f"namespace{state}; every ComputeDomain needs its own channel template name"
        ),
    )


def _other_version(obj: dict[str, Any]) -> str:
    """The served version ``obj`` is not at ("" when it is at none: not ours to judge)."""
    source = obj.get("apiVersion")
    others = [v for v in conversion.VERSIONS if v != source]
    return others[0] if source in conversion.VERSIONS and len(others) == 1 else ""


def _conversion_problem(obj: dict[str, Any]) -> str:
    """Why ``obj`` cannot be read at the other served version ("" when it can)."""
    other = _other_version(obj)
    if not other:
        return ""
    try:
        conversion.convert(obj, other)
    except conversion.ConversionError as exc:
        return (
            f"{exc} (it could not be read at {other}; the annotation is reserved for "
            "conversion between the served versions)"
        )
    return ""


def _hidden_spec_change(obj: dict[str, Any], old: dict[str, Any]) -> str:
    """How an update changes the spec as the other version reads it ("" when it does not).

    The CRD's immutability rule sees the spec at the request's version only; a reserved
    annotation holds what the other version reads as spec (numNodes, placement).
    """
    other = _other_version(obj)
    if not other or not old or old.get("apiVersion") != obj.get("apiVersion"):
        return ""
    try:
        now, before = conversion.convert(obj, other), conversion.convert(old, other)
    except conversion.ConversionError:
        return ""  # an old object the other version cannot read: let it be mended
    if now.get("spec") == before.get("spec"):
        return ""
    ours = (obj.get("metadata") or {}).get("annotations") or {}
    theirs = (old.get("metadata") or {}).get("annotations") or {}
    named = [k for k in conversion.RESERVED_ANNOTATIONS if ours.get(k) != theirs.get(k)]
    field = f"metadata.annotations[{named[0]}]" if named else "spec"
    return (
        f"{field}: this change would change the spec as {other} reads it. "
        f"{models.IMMUTABLE_SPEC_MESSAGE}"
    )
