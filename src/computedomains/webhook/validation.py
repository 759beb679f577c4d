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

from computedomains.api import conversion, domainview
from computedomains.webhook import review


def validate(request: dict[str, Any], known: Iterable[domainview.Domain]) -> review.Verdict:
    """The verdict on a CREATE or UPDATE of a ComputeDomain, given the other domains."""
    obj = request.get("object") or {}
    meta = obj.get("metadata") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    name = str(meta.get("name") or request.get("name") or "")
    shown = name or f"{meta.get('generateName', '')}*"
    unreadable = _conversion_problem(obj)
    if unreadable:
        return review.Verdict(
            allowed=False, message=f"ComputeDomain {namespace}/{shown}: {unreadable}"
        )
    template = domainview.template_of(obj)
    if not template:
        return review.Verdict()  # the schema requires it; nothing for us to compare
    old = request.get("oldObject") or {}
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


def _conversion_problem(obj: dict[str, Any]) -> str:
    """Why ``obj`` cannot be read at the other served version ("" when it can)."""
    source = obj.get("apiVersion")
    others = [v for v in conversion.VERSIONS if v != source]
    if source not in conversion.VERSIONS or not others:
        return ""  # not ours to judge: the API server matched the request to a served version
    try:
        conversion.convert(obj, others[0])
    except conversion.ConversionError as exc:
        return (
            f"{exc} (it could not be read at {others[0]}; the annotation is reserved for "
            "conversion between the served versions)"
        )
    return ""
