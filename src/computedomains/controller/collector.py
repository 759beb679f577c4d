"""Periodic collection of what a vanished ComputeDomain left behind.

Normally a domain's finalizer orders its clean-up. What escapes it — the controller was down
when a domain's finalizer was removed by hand, or a label was forged for a domain long
gone — carries the UID of a domain that no longer exists: cliques, workload
templates, node labels. :func:`find` picks those from the caches (pure); :func:`collect`
confirms with a fresh list of the domains (a cache can lag behind a domain created a moment
ago) and removes them, each with a precondition, so nothing changed meanwhile is touched.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Set
from typing import Any

from computedomains.api import constants, resources
from computedomains.api.domainview import Domain
from computedomains.controller.caches import Caches
from computedomains.kube import client, nodes

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Leftover:
    """One object (or node label) naming a domain that does not exist."""

    kind: str
    """``clique``, ``template`` or ``label``."""
    namespace: str
    name: str
    domain: str
    uid: str = ""
    resource_version: str = ""


def _leftovers(kind: str, items: Iterable[dict[str, Any]], live: Set[str]) -> list[Leftover]:
    out = []
    for obj in items:
        meta = obj.get("metadata", {})
        domain = (meta.get("labels") or {}).get(constants.COMPUTE_DOMAIN_LABEL, "")
        if domain and domain not in live:
            out.append(
                Leftover(kind, meta.get("namespace", ""), meta.get("name", ""), domain,
                         meta.get("uid", ""), meta.get("resourceVersion", ""))
            )  # fmt: skip
    return out


def find(
    *,
    live: Set[str],
    cliques: Iterable[dict[str, Any]],
    templates: Iterable[dict[str, Any]],
    node_objects: Iterable[dict[str, Any]],
) -> list[Leftover]:
    """Everything labelled with a domain UID not in ``live``."""
    return (
        _leftovers("clique", cliques, live)
        + _leftovers("template", templates, live)
        + _leftovers("label", node_objects, live)
    )


def collect(api: client.Client, caches: Caches) -> list[Leftover]:
    """Remove the leftovers of vanished domains; returns what was removed."""
    candidates = find(
        live=set(caches.domain_uids()),
        cliques=caches.cliques.items(),
        templates=caches.templates.items(),
        node_objects=caches.nodes.items(),
    )
    if not candidates:
        return []
    listing = api.get(resources.COMPUTE_DOMAINS.path())
    live = {Domain.peek(d).uid for d in listing.get("items", [])}
    removed = []
    for item in candidates:
        if item.domain in live:
            continue
        try:
            if _remove(api, caches, item):
                removed.append(item)
                log.info("collected %s %s/%s of vanished domain %s",
                         item.kind, item.namespace, item.name, item.domain)  # fmt: skip
        except client.API_ERRORS as exc:
            log.warning("could not collect %s %s: %s", item.kind, item.name, exc)
    return removed


def _remove(api: client.Client, caches: Caches, item: Leftover) -> bool:
    if item.kind == "label":
        return nodes.set_label_if(
            api, item.name, constants.COMPUTE_DOMAIN_LABEL, expected=item.domain, value="",
            resource_version=item.resource_version,
        )  # fmt: skip
    path = (
        resources.CLIQUES.path(item.name, namespace=item.namespace)
        if item.kind == "clique"
        else resources.RESOURCE_CLAIM_TEMPLATES.path(item.name, namespace=item.namespace)
    )
    preconditions = {"uid": item.uid, "resourceVersion": item.resource_version}
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
    try:
        api.delete(path, body=options)
    except client.ApiError as exc:
        if exc.failure in (client.Failure.NOT_FOUND, client.Failure.CONFLICT):
            return False  # gone, or changed since we looked: the next round decides again
        raise
    if item.kind == "clique":
        caches.written_cliques.deleted(item.uid)
    return True
