"""Pods in their wire form: the collection path an informer follows, annotation patches."""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes import client

from computedomains.kube import raw

PATH = "/api/v1/pods"
"""Every pod in every namespace (for :class:`computedomains.kube.informer.Informer`)."""


def annotate(
    api: client.ApiClient, namespace: str, name: str, annotations: Mapping[str, str | None]
) -> None:
    """Merge-patch the pod's annotations (``None`` removes one)."""
    raw.request(
        api,
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}",
        body={"metadata": {"annotations": dict(annotations)}},
        content_type="application/merge-patch+json",
    )
