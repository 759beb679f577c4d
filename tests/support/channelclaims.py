"""Channel ResourceClaims as the scheduler and the controller leave them, for unit tests."""

from __future__ import annotations

from typing import Any

from computedomains.api import constants, placement


def channel_claim(
    uid: str, domain: str, *, node: str = "n1", at: str = "2026-01-01T00:00:01Z",
    binding: bool = True, conditions: tuple[tuple[str, str], ...] = (), device: str = "channel-0",
) -> dict[str, Any]:  # fmt: skip
    """A ResourceClaim allocated one channel device of ``domain`` on ``node`` (the pool).

    ``binding``: the device carries our binding conditions; ``conditions``: (type, status) of
    the device conditions the controller wrote.
    """
    params = {"apiVersion": constants.API_VERSION, "kind": constants.CHANNEL_CONFIG_KIND,
              "domainID": domain, "allocationMode": "Single"}  # fmt: skip
    result: dict[str, Any] = {"request": "channel", "driver": constants.DRIVER_NAME,
                              "pool": node, "device": device}  # fmt: skip
    if binding:
        result |= {"bindingConditions": [placement.RESERVED_CONDITION],
                   "bindingFailureConditions": [placement.REFUSED_CONDITION]}  # fmt: skip
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [result],
                "config": [{"source": "FromClaim", "requests": ["channel"],
                            "opaque": {"driver": constants.DRIVER_NAME, "parameters": params}}],
            },
            "allocationTimestamp": at,
        }
    }  # fmt: skip
    if conditions:
        status["devices"] = [
            {"driver": constants.DRIVER_NAME, "pool": node, "device": device,
             "conditions": [{"type": t, "status": v} for t, v in conditions]}
        ]  # fmt: skip
    return {"metadata": {"uid": uid, "namespace": "ns", "name": f"claim-{uid}"}, "status": status}
