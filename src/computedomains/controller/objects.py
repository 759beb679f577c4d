"""The objects the controller creates, built in code from the domain (no templates).

Label selectors live here too, so the reconciler, the garbage collector and the caches agree
on what is ours; paths come from :mod:`computedomains.api.resources`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from computedomains.api import constants, models, placement
from computedomains.api.domainview import Domain, DomainUID
from computedomains.controller.views import CliqueID
from computedomains.kube import wire

TEMPLATE_SELECTOR = (
    f"{constants.COMPUTE_DOMAIN_LABEL},"
    f"{constants.COMPUTE_DOMAIN_TARGET_LABEL}={constants.WORKLOAD_TARGET}"
)
"""Our workload templates: labelled with a domain, target Workload."""
AGENT_SELECTOR = f"{constants.COMPONENT_LABEL}={constants.IMEX_AGENT_COMPONENT}"


def workload_template(domain: Domain) -> wire.ResourceClaimTemplate:
    """The ResourceClaimTemplate workload pods reference to join ``domain``.

    Owned by the domain (same namespace), so the garbage collector removes it even if the
    controller never sees the deletion; the controller deletes it itself in order first. Its
    request tolerates only this domain's hold on a node and selects only devices nobody else
    holds (``api/placement.py``).
    """
    config = models.ChannelConfig(domain_id=domain.uid, allocation_mode=domain.allocation_mode)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": domain.template,
            "namespace": domain.namespace,
            "labels": {
                constants.COMPUTE_DOMAIN_LABEL: domain.uid,
                constants.COMPUTE_DOMAIN_TARGET_LABEL: constants.WORKLOAD_TARGET,
            },
            "ownerReferences": [
                {
                    # The storage version: the garbage collector reads the owner there
                    # without the conversion webhook.
                    "apiVersion": constants.API_VERSION_V1BETA2,
                    "kind": constants.COMPUTE_DOMAIN_KIND,
                    "name": domain.name,
                    "uid": domain.uid,
                }
            ],
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": constants.CHANNEL_REQUEST,
                            "exactly": {
                                "deviceClassName": constants.CHANNEL_DEVICE_CLASS,
                                "selectors": [
                                    {"cel": {"expression": placement.selector(domain.uid)}}
                                ],
                                "tolerations": [placement.toleration(domain.uid)],
                            },
                        }
                    ],
                    "config": [
                        {
                            "requests": [constants.CHANNEL_REQUEST],
                            "opaque": {
                                "driver": constants.DRIVER_NAME,
                                "parameters": config.to_dict(),
                            },
                        }
                    ],
                }
            }
        },
    }


def template_current(template: dict[str, Any] | wire.ResourceClaimTemplate, domain: Domain) -> bool:
    """True when the stored template selects by ``domain``'s hold (``api/placement.py``).

    Only the selector is compared: the API server adds defaults, and drops the toleration
    where device taints are off (Kubernetes before 1.36).
    """
    spec = cast(dict[str, Any], template.get("spec") or {}).get("spec") or {}
    wanted = placement.selector(domain.uid)
    return any(
        s.get("cel", {}).get("expression") == wanted
        for r in (spec.get("devices") or {}).get("requests") or []
        for s in (r.get("exactly") or {}).get("selectors") or []
    )


def clique_object(
    *,
    namespace: str,
    uid: DomainUID,
    clique: CliqueID,
    daemons: Sequence[models.CliqueDaemon],
    members: Iterable[str],
) -> dict[str, Any]:
    """A new ComputeDomainClique listing ``daemons``, naming ``members`` of them members."""
    body = models.ComputeDomainCliqueV1Beta2(
        metadata={
            "name": models.clique_name(uid, clique),
            "namespace": namespace,
            "labels": {constants.COMPUTE_DOMAIN_LABEL: uid, constants.CLIQUE_ID_LABEL: clique},
        },
        daemons=tuple(daemons),
    ).to_dict()
    body.setdefault("daemons", [])
    name_members(body, members)
    return body


def name_members(obj: dict[str, Any], members: Iterable[str]) -> None:
    """Set the clique object's members annotation (``CLIQUE_MEMBERS_ANNOTATION``)."""
    annotations = obj.setdefault("metadata", {}).get("annotations") or {}
    annotations[constants.CLIQUE_MEMBERS_ANNOTATION] = models.clique_members_value(members)
    obj["metadata"]["annotations"] = annotations


def owned_by(obj: dict[str, Any] | wire.ResourceClaimTemplate, uid: str) -> bool:
    """True when ``obj`` carries the domain label of ``uid``."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return bool(labels.get(constants.COMPUTE_DOMAIN_LABEL) == uid)
