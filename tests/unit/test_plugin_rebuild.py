"""Rebuilding the node's claims without a checkpoint: from CDI specs, claims and the label."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains.api import constants
from computedomains.kubeletplugin import cdi, checkpoint, claims, devices, rebuild

NODE = "n1"
DOMAIN, OTHER = "cd-1", "cd-2"
COMPLETED, STARTED = checkpoint.ClaimState.COMPLETED, checkpoint.ClaimState.STARTED
CHANNEL = devices.DeviceType.CHANNEL


def _claim(
    uid: str, device: str = "channel-0", *, domain: str = DOMAIN, node: str = NODE
) -> dict[str, Any]:
    daemon = device == devices.DAEMON_DEVICE
    parameters = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND if daemon else constants.CHANNEL_CONFIG_KIND,
        "domainID": domain,
    }
    config = [
        {"requests": [], "opaque": {"driver": constants.DRIVER_NAME, "parameters": parameters}}
    ]
    return {
        "metadata": {"uid": uid, "namespace": "team-a", "name": f"claim-{uid}"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": constants.DRIVER_NAME,
                            "pool": node,
                            "device": device,
                        }
                    ],
                    "config": config if domain else [],
                }
            }
        },
    }


def _spec(uid: str, device: str = "channel-0", *, domain: str = DOMAIN) -> cdi.SpecInfo:
    kind = (
        devices.DeviceType.DAEMON if device == devices.DAEMON_DEVICE else devices.DeviceType.CHANNEL
    )
    return cdi.SpecInfo(uid, "team-a", f"claim-{uid}", domain, kind, (device,))


def _states(
    plan: rebuild.Plan,
) -> dict[str, tuple[checkpoint.ClaimState, str, devices.DeviceType | None]]:
    return {u: (e.state, e.domain_uid, e.device_type) for u, e in plan.entries.items()}


CASES = [
    pytest.param(
        [_spec("a"), _spec("b", "channel-0-s1")],
        [_claim("a"), _claim("b", "channel-0-s1")],
        DOMAIN,
        {"a": (COMPLETED, DOMAIN, CHANNEL), "b": (COMPLETED, DOMAIN, CHANNEL)},
        (),
        id="specs of claims allocated here: prepared",
    ),
    pytest.param(
        [_spec("a")],
        [_claim("a")],
        None,
        {"a": (COMPLETED, DOMAIN, CHANNEL)},
        (),
        id="a spec holds the node even when the label was removed by hand",
    ),
    pytest.param(
        [_spec("a")],
        [_claim("a"), _claim("w", "channel-0-s1")],
        DOMAIN,
        {"a": (COMPLETED, DOMAIN, CHANNEL), "w": (STARTED, DOMAIN, CHANNEL)},
        (),
        id="a claim of the label's domain without a spec was waiting for IMEX",
    ),
    pytest.param(
        [],
        [_claim("a"), _claim("b", "channel-0-s1")],
        DOMAIN,
        {"a": (STARTED, DOMAIN, CHANNEL), "b": (STARTED, DOMAIN, CHANNEL)},
        (),
        id="no spec (a node without a fabric writes none): prepared again, checked again",
    ),
    pytest.param(
        [_spec("a")],
        [_claim("a"), _claim("x", "channel-0-s1", domain=OTHER)],
        DOMAIN,
        {"a": (COMPLETED, DOMAIN, CHANNEL)},
        (),
        id="another domain's claim refused here holds nothing",
    ),
    pytest.param(
        [],
        [_claim("x")],
        None,
        {},
        (),
        id="no label and no spec: nothing was prepared yet",
    ),
    pytest.param(
        [_spec("gone"), _spec("a")],
        [_claim("a"), _claim("elsewhere", node="n2")],
        DOMAIN,
        {"a": (COMPLETED, DOMAIN, CHANNEL)},
        ("gone",),
        id="specs of claims deleted (or allocated elsewhere) are stale",
    ),
    pytest.param(
        [_spec("agent", devices.DAEMON_DEVICE, domain="")],
        [_claim("agent", devices.DAEMON_DEVICE, domain=""), _claim("d2", devices.DAEMON_DEVICE)],
        None,
        {"agent": (COMPLETED, "", devices.DeviceType.DAEMON)},
        (),
        id="the agent's daemon claim is rebuilt from its spec, never from the API alone",
    ),
]


@pytest.mark.parametrize(("specs", "items", "label", "entries", "stale"), CASES)
def test_rebuild_plan(
    specs: list[cdi.SpecInfo],
    items: list[dict[str, Any]],
    label: str | None,
    entries: dict[str, tuple[checkpoint.ClaimState, str, str]],
    stale: tuple[str, ...],
) -> None:
    plan = rebuild.plan(
        specs=specs,
        allocated=rebuild.allocated_here(items, node=NODE),
        node_label=label,
    )
    assert _states(plan) == entries
    assert plan.stale_specs == stale


def test_rebuilt_entries_answer_the_kubelet_as_the_prepare_did() -> None:
    """Same devices and CDI IDs, and the allocation digest that spots a stale retry."""
    claim = _claim("a", "channel-0-s3")
    plan = rebuild.plan(
        specs=[_spec("a", "channel-0-s3")],
        allocated=rebuild.allocated_here([claim], node=NODE),
        node_label=DOMAIN,
    )
    entry = plan.entries["a"]
    view = claims.view(claim, expected_uid="a")
    assert (entry.namespace, entry.name, entry.allocation) == (
        "team-a",
        "claim-a",
        view.allocation_digest,
    )
    assert entry.devices == (
        checkpoint.PreparedDevice(
            ("r",), NODE, "channel-0-s3", (cdi.device_id("a", "channel-0-s3"),)
        ),
    )
    assert plan.summary() == (
        "rebuilt 1 claims from CDI specs and the API (1 prepared, 0 being prepared), "
        "removed 0 stale CDI specs"
    )
    waiting = rebuild.plan(
        specs=[],
        allocated=rebuild.allocated_here([claim], node=NODE),
        node_label=DOMAIN,
    )
    assert waiting.entries["a"].devices == () and waiting.entries["a"].holds_node()


def test_claims_of_other_drivers_or_nodes_are_not_ours() -> None:
    foreign = _claim("f")
    foreign["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com"
    unallocated = {"metadata": {"uid": "u", "namespace": "n", "name": "c"}, "status": {}}
    assert rebuild.allocated_here([foreign, unallocated, _claim("x", node="n2")], node=NODE) == []
