"""A DaemonSet's pods as its controller sees them: which run its current template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.api import constants

VERSION_LABEL = constants.VERSION_LABEL
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
"""On a DaemonSet: the generation of its pod template (the apps/v1 API keeps it up to date)."""
TEMPLATE_GENERATION_LABEL = "pod-template-generation"
"""On a DaemonSet's pod: the template generation it was made from (its controller sets it)."""
REVISION_HASH_LABEL = "controller-revision-hash"
"""On a DaemonSet's pod: the hash of the template revision it was made from."""


# -- DaemonSet pods -----------------------------------------------------------------------


def match_labels(workload: Mapping[str, Any]) -> str:
    """A workload's ``spec.selector.matchLabels`` as a label selector string."""
    selector = ((workload.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def current_pods(pods: Sequence[Mapping[str, Any]], daemonset: Mapping[str, Any]) -> set[str]:
    """UIDs of the DaemonSet's pods made from its current pod template.

    As the DaemonSet controller decides it: the pod's template generation is the DaemonSet's,
    or its ``controller-revision-hash`` is that of such a pod (after a rollback the template,
    and so the hash, is an older one again while the generation moved on).
    """
    annotations = (daemonset.get("metadata") or {}).get("annotations") or {}
    generation = annotations.get(TEMPLATE_GENERATION_ANNOTATION)

    def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
        return (pod.get("metadata") or {}).get("labels") or {}

    newest = [p for p in pods if generation is not None
              and labels(p).get(TEMPLATE_GENERATION_LABEL) == generation]  # fmt: skip
    hashes = {labels(p).get(REVISION_HASH_LABEL) for p in newest} - {None}
    return {
        str((p.get("metadata") or {}).get("uid"))
        for p in pods
        if p in newest or labels(p).get(REVISION_HASH_LABEL) in hashes
    }
