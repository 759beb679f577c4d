"""Pods in their wire form: the collection path an informer follows, readiness, annotations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomains.api import resources
from computedomains.kube import client

PATH = resources.PODS.path()
"""Every pod in every namespace (for :class:`computedomains.kube.informer.Informer`)."""


def is_ready(pod: Mapping[str, Any]) -> bool:
    """True when the object's ``Ready`` condition is True (a pod's; a Node's reads the same)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def annotate(
    api: client.Client, namespace: str, name: str, annotations: Mapping[str, str | None]
) -> None:
    """Merge-patch the pod's annotations (``None`` removes one)."""
    api.patch(
        resources.PODS.path(name, namespace=namespace),
        {"metadata": {"annotations": dict(annotations)}},
    )
