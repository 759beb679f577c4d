"""What the controller's caches keep of each object: the fields it reads, nothing else.

A large cluster's Nodes, agent Pods and ResourceClaims would fill the caches whole. Each
function here is an informer's ``transform`` (:mod:`computedomains.controller.caches`).
"""

from __future__ import annotations

from typing import Any

from computedomains.api import imex, placement

KEPT_REQUEST_FIELDS = ("deviceClassName", "tolerations")
"""What the turn reads of a claim's requests (``placement.asks_for_a_channel``)."""


def node(obj: dict[str, Any]) -> dict[str, Any]:
    """Only a node's identity and labels: a large cluster's Nodes would fill the cache."""
    meta = obj.get("metadata", {})
    keep = ("name", "uid", "resourceVersion", "labels")
    return {"metadata": {k: meta[k] for k in keep if k in meta}}


def pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What :func:`views.agent_of` reads of an agent pod: its report and whether it runs."""
    meta, status = obj.get("metadata", {}), obj.get("status", {})
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp", "labels")  # fmt: skip
    trimmed = {k: meta[k] for k in keep if k in meta}
    ours = (imex.DOMAIN_ANNOTATION, imex.START_ANNOTATION)
    annotations = meta.get("annotations") or {}
    trimmed["annotations"] = {k: annotations[k] for k in ours if k in annotations}
    containers = [
        {"name": c["name"], "state": c.get("state") or {}}
        for c in status.get("containerStatuses") or []
        if c.get("name") == imex.AGENT_CONTAINER
    ]
    return {
        "metadata": trimmed,
        "spec": {"nodeName": obj.get("spec", {}).get("nodeName", "")},
        "status": {
            **{k: status[k] for k in ("podIP", "conditions") if k in status},
            "containerStatuses": containers,
        },
    }


def claim(obj: dict[str, Any]) -> dict[str, Any]:
    """What placement reads of a claim; claims of other drivers keep their identity only.

    A channel claim not allocated yet keeps its config: its domain is placing (``turns``).
    """
    meta = obj.get("metadata", {})
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
            "deletionTimestamp")  # fmt: skip
    trimmed: dict[str, Any] = {"metadata": {k: meta[k] for k in keep if k in meta}}
    pod_owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"]
    if pod_owners:  # generated for a pod (from a template): deleted with it
        trimmed["metadata"]["ownerReferences"] = pod_owners
    if placement.parse_claim(obj) is None and not placement.asks_for_a_channel(obj):
        return trimmed
    status = obj.get("status") or {}
    devices = (obj.get("spec") or {}).get("devices") or {}
    requests = [
        {"exactly": {k: (r.get("exactly") or {}).get(k) for k in KEPT_REQUEST_FIELDS}}
        for r in devices.get("requests") or []
    ]
    trimmed["spec"] = {"devices": {"config": devices.get("config", []), "requests": requests}}
    trimmed["status"] = {
        k: status[k] for k in ("allocation", "devices", "reservedFor") if k in status
    }
    return trimmed
