"""Decide whether and how a claim can be prepared on this node: pure, table-testable."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from computedomains.api import models, schema
from computedomains.kubeletplugin import checkpoint, claims, devices, errors, nodestate

DomainLookup = Callable[[str], dict[str, Any] | None]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What preparing a claim will do."""

    device_type: devices.DeviceType
    domain_uid: str
    """"" for an IMEX-agent daemon claim that names no domain."""
    domain: dict[str, Any] | None
    all_channels: bool = False

    @property
    def domain_label(self) -> str:
        """How messages name the domain: ``ComputeDomain <ns>/<name> (<uid>)``."""
        return describe(self.domain, self.domain_uid)


def describe(domain: dict[str, Any] | None, uid: str) -> str:
    """``ComputeDomain <ns>/<name> (<uid>)``, or just the UID when the object is unknown."""
    if domain is None:
        return f"ComputeDomain {uid}"
    meta = domain["metadata"]
    return f"ComputeDomain {meta['namespace']}/{meta['name']} ({uid})"


def plan(view: claims.ClaimView, *, fabric: nodestate.Fabric, domain_of: DomainLookup) -> Plan:
    """Check the claim against its config, its ComputeDomain and the node's fabric."""
    where = f"claim {view.namespace}/{view.name}"
    types = {devices.device_type(d.device) for d in view.devices}
    if None in types or len(types) != 1:
        names = ", ".join(d.device for d in view.devices)
        raise errors.Permanent(
            "UnexpectedDevices",
            f"{where} holds devices this plugin does not prepare together: {names}",
        )
    device_type = types.pop()
    assert device_type is not None
    parameters = claims.parameters_for(view, view.devices[0].request)
    if parameters is None:
        if device_type is devices.DeviceType.DAEMON:
            return Plan(device_type, "", None)  # the IMEX agent's own claim: no domain identity
        raise errors.Permanent(
            "MissingChannelConfig",
            f"{where} carries no ComputeDomainChannelConfig: "
            "channel claims come from a ComputeDomain's ResourceClaimTemplate",
        )
    try:
        config = models.parse_opaque_config(parameters)
    except schema.ValidationError as exc:
        raise errors.Permanent("InvalidConfig", f"{where}: invalid opaque config: {exc}") from None
    wanted = (
        models.ChannelConfig if device_type is devices.DeviceType.CHANNEL else models.DaemonConfig
    )
    if not isinstance(config, wanted):
        raise errors.Permanent(
            "ConfigDoesNotMatchDevice",
            f"{where}: a {type(config).__name__} cannot configure a {device_type.value} device",
        )
    domain = domain_of(config.domain_id)
    if domain is None:
        raise errors.Permanent(
            "ComputeDomainNotFound",
            f"{where} refers to ComputeDomain UID {config.domain_id}, which does not exist",
        )
    if device_type is devices.DeviceType.DAEMON:
        return Plan(device_type, config.domain_id, domain)
    if domain["metadata"]["namespace"] != view.namespace:
        raise errors.Permanent(
            "NamespaceMismatch",
            f"{where} is in namespace {view.namespace}, but "
            f"{describe(domain, config.domain_id)} is not: a workload can only use "
            "a ComputeDomain of its own namespace",
        )
    if not fabric.usable:
        raise errors.Retryable(
            "FabricNotUsable",
            f"the node's NVLink fabric is {fabric.verdict} ({fabric.reason}): {fabric.message}",
        )
    assert isinstance(config, models.ChannelConfig)
    return Plan(
        device_type,
        config.domain_id,
        domain,
        all_channels=config.allocation_mode is models.AllocationMode.ALL,
    )


def check_node(plan: Plan, state: checkpoint.Checkpoint, domain_of: DomainLookup) -> None:
    """A node is in one domain at a time: refuse a channel of another while one is held."""
    if plan.device_type is not devices.DeviceType.CHANNEL:
        return
    holders = {e.domain_uid for e in state.claims.values() if e.holds_node()} - {plan.domain_uid}
    if holders:
        other = holders.pop()
        raise errors.Retryable(
            "NodeInAnotherComputeDomain",
            f"{plan.domain_label} cannot use this "
            f"node: it is in {describe(domain_of(other), other)} until that "
            "domain's pods on it are gone",
        )
