"""Why a channel claim can never be prepared: one wording for the plugin and the controller.

The kubelet plugin refuses such a claim at prepare; the controller says the same on the claim
as soon as it sees it (``controller/claimcheck.py``), before any pod of it reaches a node.
"""

from __future__ import annotations

from computedomains.api.schema import ValidationError

MISSING_CONFIG = "MissingChannelConfig"
INVALID_CONFIG = "InvalidConfig"
DOMAIN_NOT_FOUND = "ComputeDomainNotFound"


def missing_config(where: str) -> str:
    """A channel claim without a ComputeDomainChannelConfig."""
    return (
        f"{where} carries no ComputeDomainChannelConfig: "
        "channel claims come from a ComputeDomain's ResourceClaimTemplate"
    )


def invalid_config(where: str, exc: ValidationError) -> str:
    """An opaque config of ours that does not parse (the field is named)."""
    return f"{where}: invalid opaque config: {exc}"


def domain_not_found(where: str, uid: str, namespace: str) -> str:
    """A claim naming a domain that is not in its namespace.

    One answer whether the domain is elsewhere or nowhere: a tenant learns nothing of
    another's domains by naming their UIDs.
    """
    return (
        f"{where} refers to ComputeDomain UID {uid}, which does not exist in namespace "
        f"{namespace}: a workload can only use a ComputeDomain of its own namespace"
    )
