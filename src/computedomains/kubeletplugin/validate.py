"""Decide whether and how a claim can be prepared on this node: pure, table-testable."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from computedomains.api import claimrefusals, domainview, fabricverdict, models, schema
from computedomains.kubeletplugin import checkpoint, claims, devices, errors

DomainLookup = Callable[[str], domainview.Domain | None]
"""The ComputeDomain with a UID, or None (``domainlookup.DomainLookup.in_namespace``)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What preparing a claim will do."""

    device_type: devices.DeviceType
    domain_uid: str
    """"" for an IMEX-agent daemon claim that names no domain."""
    domain: domainview.Domain | None
    all_channels: bool = False

    @property
    def domain_label(self) -> str:
        """How messages name the domain: ``ComputeDomain <ns>/<name> (<uid>)``."""
        return describe(self.domain, self.domain_uid)


def describe(domain: domainview.Domain | None, uid: str) -> str:
    """``ComputeDomain <ns>/<name> (<uid>)``, or just the UID when the object is unknown."""
    if domain is None:
        return f"ComputeDomain {uid}"
    return f"ComputeDomain {domain.key} ({uid})"


def plan(
    view: claims.ClaimView,
    *,
    fabric: fabricverdict.NodeFabric,
    domain_of: DomainLookup,
    driver_namespace: str,
) -> Plan:
    """Check the claim against its config, its ComputeDomain and the node's fabric.

    ``driver_namespace`` is where the chart runs the IMEX agent: the only namespace whose
    claims may hold a node's daemon (IMEX management) device.
    """
    where = f"claim {view.namespace}/{view.name}"
    device_type = _device_type(view, where=where, driver_namespace=driver_namespace)
    config = _config(view, device_type, where=where)
    if config is None:
        return Plan(device_type, "", None)  # the IMEX agent's own claim: no domain identity
    domain = domain_of(config.domain_id)
    if isinstance(config, models.DaemonConfig):
        if domain is None:
            raise errors.Permanent(
                claimrefusals.DOMAIN_NOT_FOUND,
                f"{where} refers to ComputeDomain UID {config.domain_id}, which does not exist",
            )
        return Plan(device_type, config.domain_id, domain)
    if domain is None or domain.namespace != view.namespace:
        raise errors.Permanent(
            claimrefusals.DOMAIN_NOT_FOUND,
            claimrefusals.domain_not_found(where, config.domain_id, view.namespace),
        )
    if not fabric.usable:
        raise errors.Retryable(
            "FabricNotUsable",
            f"the node's NVLink fabric is {fabric.verdict} ({fabric.reason}): {fabric.message}",
        )
    return Plan(
        device_type,
        config.domain_id,
        domain,
        all_channels=config.allocation_mode is models.AllocationMode.ALL,
    )


def _device_type(
    view: claims.ClaimView, *, where: str, driver_namespace: str
) -> devices.DeviceType:
    """The one type of device the claim holds; a daemon device only in the driver's namespace."""
    types = {devices.device_type(d.device) for d in view.devices}
    device_type = types.pop() if len(types) == 1 else None
    if device_type is None:
        names = ", ".join(d.device for d in view.devices)
        raise errors.Permanent(
            "UnexpectedDevices",
            f"{where} holds devices this plugin does not prepare together: {names}",
        )
    if device_type is devices.DeviceType.DAEMON and view.namespace != driver_namespace:
        # Whoever holds the management device can run an IMEX daemon of their own on the node.
        raise errors.Permanent(
            "DaemonClaimOutsideDriverNamespace",
            f"{where} holds the node's IMEX daemon device, which only the IMEX agent in "
            f"namespace {driver_namespace} may use: workloads claim channels from their "
            "ComputeDomain's ResourceClaimTemplate",
        )
    return device_type


def _config(
    view: claims.ClaimView, device_type: devices.DeviceType, *, where: str
) -> models.ChannelConfig | models.DaemonConfig | None:
    """The claim's opaque config, of the kind its device takes.

    None for a daemon claim without one (the IMEX agent's own); a channel claim must have one.
    """
    parameters = claims.parameters_for(view, view.devices[0].request)
    if parameters is None:
        if device_type is devices.DeviceType.DAEMON:
            return None
        raise errors.Permanent(claimrefusals.MISSING_CONFIG, claimrefusals.missing_config(where))
    try:
        config = models.parse_opaque_config(parameters)
    except schema.ValidationError as exc:
        raise errors.Permanent(
            claimrefusals.INVALID_CONFIG, claimrefusals.invalid_config(where, exc)
        ) from None
    wanted = (
        models.ChannelConfig if device_type is devices.DeviceType.CHANNEL else models.DaemonConfig
    )
    if not isinstance(config, wanted):
        raise errors.Permanent(
            "ConfigDoesNotMatchDevice",
            f"{where}: a {type(config).__name__} cannot configure a {device_type.value} device",
        )
    return config


def other_holder(entry: checkpoint.ClaimEntry, held: Iterable[checkpoint.ClaimEntry]) -> str | None:
    """The domain that keeps ``entry``'s domain off the node, if any (a node is in one at a time).

    ``held`` are the node's other claims; an aborted claim or a daemon claim holds nothing.
    """
    if not entry.holds_node():
        return None
    others = {e.domain_uid for e in held if e.holds_node() and e.uid != entry.uid}
    others.discard(entry.domain_uid)
    return min(others) if others else None


def node_busy(plan: Plan, other: str, *, domain_of: DomainLookup) -> errors.Retryable:
    """The refusal of ``plan`` while ``other`` holds the node.

    Names the other domain only when ``domain_of`` finds it (in the claim's namespace): the
    message goes to the claim's tenant.
    """
    found = domain_of(other)
    holder = describe(found, other) if found is not None else "another ComputeDomain"
    return errors.Retryable(
        "NodeInAnotherComputeDomain",
        f"{plan.domain_label} cannot use this node: it is in {holder} "
        "until that domain's pods on it are gone",
    )
