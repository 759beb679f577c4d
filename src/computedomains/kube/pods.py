"""Pods in their wire form: the collection path an informer follows, patches of annotations."""

from __future__ import annotations

from collections.abc import Mapping

from computedomains.api import resources
from computedomains.kube import client

PATH = resources.PODS.path()
"""Every pod in every namespace (for :class:`computedomains.kube.informer.Informer`)."""


def annotate(
    api: client.Client, namespace: str, name: str, annotations: Mapping[str, str | None]
) -> None:
    """Merge-patch the pod's annotations (``None`` removes one)."""
    api.patch(
        resources.PODS.path(name, namespace=namespace),
        {"metadata": {"annotations": dict(annotations)}},
    )
