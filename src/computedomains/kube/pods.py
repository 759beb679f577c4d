"""Pods in their wire form: the collection path an informer follows, patches of annotations."""

from __future__ import annotations

from collections.abc import Mapping

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
