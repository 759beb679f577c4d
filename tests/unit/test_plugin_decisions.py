"""The kubelet plugin's pure decisions: what a claim holds, whether it may be prepared."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from computedomains.api import constants, domainview, fabricverdict
from computedomains.kubeletplugin import checkpoint, claims, devices, errors, validate

HEALTHY = fabricverdict.NodeFabric("healthy", "FabricHealthy", "", "abc.1", 2048)
NO_FABRIC = fabricverdict.NodeFabric("no-fabric", "NoFabric", "", "", 0)
BROKEN = fabricverdict.NodeFabric(
    "broken", "FabricRegistrationFailed", "registration failed", "", 0
)


def _domain(uid: str, namespace: str = "team-a", name: str = "cd") -> domainview.Domain:
    return domainview.Domain.peek({"metadata": {"uid": uid, "namespace": namespace, "name": name}})


DOMAINS = {
    "cd-1": _domain("cd-1"),
    "cd-2": _domain("cd-2", name="other"),
    "cd-x": _domain("cd-x", "team-b"),
}


def _claim(
    device: str = "channel-0", params: dict[str, Any] | None = None, **meta: str
) -> dict[str, Any]:
    config = []
    if params is not None:
        config = [
            {
                "source": "FromClaim",
                "requests": ["channel"],
                "opaque": {"driver": constants.DRIVER_NAME, "parameters": params},
            }
        ]
    return {
        "metadata": {"uid": "u1", "namespace": meta.get("namespace", "team-a"), "name": "c1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "channel",
                            "driver": constants.DRIVER_NAME,
                            "pool": "n1",
                            "device": device,
                        }
                    ],
                    "config": config,
                }
            },
            "reservedFor": [{"resource": "pods", "name": "p1", "uid": "pu1"}],
        },
    }


def _channel(domain: str = "cd-1", mode: str | None = None, **extra: Any) -> dict[str, Any]:
    params = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.CHANNEL_CONFIG_KIND,
        "domainID": domain,
    }
    if mode:
        params["allocationMode"] = mode
    return {**params, **extra}


DRIVER_NAMESPACE = "compute-domains"


def _daemon(domain: str = "cd-1") -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.DAEMON_CONFIG_KIND,
        "domainID": domain,
    }


def _plan(claim: dict[str, Any], fabric: fabricverdict.NodeFabric = HEALTHY) -> validate.Plan:
    return validate.plan(
        claims.view(claim, expected_uid="u1"),
        fabric=fabric,
        domain_of=DOMAINS.get,
        driver_namespace=DRIVER_NAMESPACE,
    )


def test_slots_publish_channel_zero_many_times_plus_the_daemon() -> None:
    published = devices.node_devices(slots=3, usable=True)
    assert [d.name for d in published] == ["channel-0", "channel-0-s1", "channel-0-s2", "daemon-0"]
    assert devices.node_devices(slots=3, usable=False) == []
    manifest = devices.slice_manifest(
        node_name="n1", node_uid="x", devices=published, clique="abc.1", holder="",
        turn="", binding_conditions=True, generation=2,
    )  # fmt: skip
    attrs = manifest["spec"]["devices"][1]["attributes"]
    assert attrs["type"] == {"string": "channel"} and attrs["id"] == {"int": 0}
    assert attrs[constants.CLIQUE_ATTRIBUTE] == {"string": "abc.1"}
    assert manifest["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert devices.device_type("channel-0-s7") is devices.DeviceType.CHANNEL
    assert devices.device_type("gpu-0") is None


def test_claim_view_strips_subrequests_and_orders_class_configs_first() -> None:
    claim = _claim(params=_channel())
    allocation = claim["status"]["allocation"]["devices"]
    allocation["results"][0]["request"] = "channel/sub"
    allocation["config"].insert(
        0,
        {
            "source": "FromClass",
            "requests": [],
            "opaque": {"driver": constants.DRIVER_NAME, "parameters": {"x": 1}},
        },
    )
    view = claims.view(claim, expected_uid="u1")
    assert view.devices[0].request == "channel"
    assert claims.parameters_for(view, "channel") == _channel()
    assert view.reserved_for == (("p1", "pu1"),)


@pytest.mark.parametrize(
    ("claim", "fabric", "reason"),
    [
        (_claim(params=None), HEALTHY, "MissingChannelConfig"),
        (_claim(params=_channel(allocatonMode="All")), HEALTHY, "InvalidConfig"),
        (_claim(params=_channel(domain="")), HEALTHY, "InvalidConfig"),
        (_claim(params=_channel(domain="nope")), HEALTHY, "ComputeDomainNotFound"),
        (_claim(params=_channel(domain="cd-x")), HEALTHY, "ComputeDomainNotFound"),
        (_claim(params=_channel()), BROKEN, "FabricNotUsable"),
        (
            _claim(device="daemon-0", params=_channel(), namespace=DRIVER_NAMESPACE),
            HEALTHY,
            "ConfigDoesNotMatchDevice",
        ),
        (_claim(device="daemon-0", params=None), HEALTHY, "DaemonClaimOutsideDriverNamespace"),
        (
            _claim(device="daemon-0", params=_daemon(), namespace="team-a"),
            HEALTHY,
            "DaemonClaimOutsideDriverNamespace",
        ),
        (_claim(device="gpu-3", params=_channel()), HEALTHY, "UnexpectedDevices"),
    ],
)
def test_claims_that_cannot_be_prepared_say_why(
    claim: dict[str, Any], fabric: fabricverdict.NodeFabric, reason: str
) -> None:
    with pytest.raises(errors.PrepareError) as refused:
        _plan(claim, fabric)
    assert refused.value.reason == reason
    assert refused.value.retryable is (reason == "FabricNotUsable")


def test_another_namespaces_domain_is_refused_as_if_it_did_not_exist() -> None:
    """A tenant naming another's domain UID learns nothing of it: not its name, not that it
    exists."""
    with pytest.raises(errors.Permanent) as foreign:
        _plan(_claim(params=_channel(domain="cd-x")))
    with pytest.raises(errors.Permanent) as nowhere:
        _plan(_claim(params=_channel(domain="cd-y")))
    assert foreign.value.reason == nowhere.value.reason == "ComputeDomainNotFound"
    assert foreign.value.message == nowhere.value.message.replace("cd-y", "cd-x")
    assert "team-b" not in foreign.value.message
    assert "does not exist in namespace team-a" in foreign.value.message


def test_a_node_held_by_another_tenants_domain_is_refused_without_naming_it() -> None:
    plan = _plan(_claim(params=_channel(domain="cd-1")))
    refused = validate.node_busy(plan, "cd-x", domain_of=lambda uid: None)
    assert "it is in another ComputeDomain until" in refused.message
    assert "cd-x" not in refused.message and "team-b" not in refused.message


def test_unknown_opaque_field_is_named() -> None:
    with pytest.raises(errors.Permanent, match="allocatonMode"):
        _plan(_claim(params=_channel(allocatonMode="All")))


def test_unallocated_or_replaced_claims_are_refused() -> None:
    claim = _claim(params=_channel())
    with pytest.raises(errors.Permanent, match="recreated"):
        claims.view(claim, expected_uid="other")
    claim["status"] = {}
    with pytest.raises(errors.Permanent, match="not allocated"):
        claims.view(claim, expected_uid="u1")


def test_plans_for_channel_modes_and_a_node_without_fabric() -> None:
    assert _plan(_claim(params=_channel(mode="All"))).all_channels
    single = _plan(_claim(params=_channel()), NO_FABRIC)
    assert not single.all_channels and single.domain_uid == "cd-1"


def _entry(
    uid: str, domain: str, state: checkpoint.ClaimState = checkpoint.ClaimState.COMPLETED
) -> checkpoint.ClaimEntry:
    return checkpoint.ClaimEntry(
        uid, "team-a", uid, state, domain, devices.DeviceType.CHANNEL, "digest"
    )


def test_several_claims_of_one_domain_share_a_node_but_another_domain_is_refused_by_name() -> None:
    held = [_entry("a", "cd-1"), _entry("b", "cd-1", checkpoint.ClaimState.STARTED)]
    assert validate.other_holder(_entry("c", "cd-1"), held) is None  # same domain: fine
    other = _entry("c", "cd-2", checkpoint.ClaimState.STARTED)
    assert validate.other_holder(other, held) == "cd-1"
    refused = validate.node_busy(
        _plan(_claim(params=_channel(domain="cd-2"))), "cd-1", domain_of=DOMAINS.get
    )
    assert refused.reason == "NodeInAnotherComputeDomain" and refused.retryable
    assert "team-a/other (cd-2)" in refused.message and "team-a/cd (cd-1)" in refused.message
    aborted = [_entry("a", "cd-1", checkpoint.ClaimState.ABORTED)]
    assert validate.other_holder(other, aborted) is None  # aborted claims hold nothing
    daemon = dataclasses.replace(_entry("d", "cd-2"), device_type=devices.DeviceType.DAEMON)
    assert validate.other_holder(daemon, held) is None  # a daemon claim never joins a domain
    assert validate.other_holder(_entry("a", "cd-2"), [_entry("a", "cd-1")]) is None  # itself


def test_daemon_claims_prepare_in_the_driver_namespace_only() -> None:
    agent = _plan(_claim(device="daemon-0", params=None, namespace=DRIVER_NAMESPACE))
    assert agent.device_type is devices.DeviceType.DAEMON and agent.domain_uid == ""
    incumbent = _plan(_claim(device="daemon-0", params=_daemon(), namespace=DRIVER_NAMESPACE))
    assert incumbent.domain_uid == "cd-1"
    with pytest.raises(
        errors.Permanent, match=f"only the IMEX agent in namespace {DRIVER_NAMESPACE}"
    ):
        _plan(_claim(device="daemon-0", params=None, namespace="team-a"))
