"""Pods in their wire form: the collection path an informer follows, patches of annotations.

The IMEX agent also sets its own pod's condition here.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from computedomains.kube import client

PATH = "/api/v1/pods"
"""Every pod in every namespace (for :class:`computedomains.kube.informer.Informer`)."""


def annotate(
    api: client.Client, namespace: str, name: str, annotations: Mapping[str, str | None]
) -> None:
    """Merge-patch the pod's annotations (``None`` removes one)."""
    api.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        {"metadata": {"annotations": dict(annotations)}},
    )


def set_condition(
    api: client.Client,
    namespace: str,
    name: str,
    *,
    uid: str,
    condition_type: str,
    status: str,
    reason: str,
    message: str,
) -> None:
    """Set one condition of the pod through ``pods/status``, leaving the others alone.

    ``uid`` (when not empty) makes the write fail rather than touch a newer pod of the same
    name. The transition time moves only when the status changes, as for the kubelet's own.
    """
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    pod = api.get(path)
    current = next(
        (
            c
            for c in pod.get("status", {}).get("conditions") or []
            if c.get("type") == condition_type
        ),
        None,
    )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    transition = now
    if current is not None and current.get("status") == status:
        transition = current.get("lastTransitionTime") or now
    condition = {"type": condition_type, "status": status, "reason": reason, "message": message,
                 "lastProbeTime": now, "lastTransitionTime": transition}  # fmt: skip
    body: dict[str, Any] = {"status": {"conditions": [condition]}}
    if uid:
        body["metadata"] = {"uid": uid}
    # Pod conditions merge by type in a strategic merge patch: no other condition is touched.
    api.patch(f"{path}/status", body, strategic=True)
