"""Placement across domains: what the plugin publishes, how claims are read, who gets a node."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from typing import Any, cast

import pytest

from computedomains.api import constants, models, placement
from computedomains.controller import decide as decide_domain
from computedomains.controller import freenodes as decide
from computedomains.controller import objects
from computedomains.controller.views import Claim, NodeInfo, NodeName
from computedomains.kubeletplugin import claims, devices
from tests.support import snapshots
from tests.support.channelclaims import channel_claim as _claim

X, Y, Z = "uid-x", "uid-y", "uid-z"
NAMES = {X: "ComputeDomain a/x", Y: "ComputeDomain b/y"}


def _slice(holder: str, *, turn: str = "", binding: bool = True) -> dict[str, dict[str, Any]]:
    published = devices.node_devices(slots=2, usable=True)
    manifest = devices.slice_manifest(
        node_name="n1", node_uid="u", devices=published, clique="c.1", holder=holder, turn=turn,
        binding_conditions=binding, generation=1,
    )  # fmt: skip
    return {d["name"]: d for d in manifest["spec"]["devices"]}


def test_a_held_node_taints_its_channels_for_the_holder_only() -> None:
    published = _slice(X)
    for name in ("channel-0", "channel-0-s1"):
        assert published[name]["taints"] == [
            {"key": constants.COMPUTE_DOMAIN_LABEL, "value": X, "effect": "NoSchedule"}
        ]
        assert published[name]["attributes"][placement.HOLDER_ATTRIBUTE] == {"string": X}
        assert "bindingConditions" not in published[name]
    daemon = published[devices.DAEMON_DEVICE]
    assert "taints" not in daemon and "bindingConditions" not in daemon
    assert placement.HOLDER_ATTRIBUTE not in daemon["attributes"]


def test_a_free_node_asks_the_controller_before_binding() -> None:
    published = _slice("")
    channel = published["channel-0-s1"]
    assert "taints" not in channel
    assert channel["bindingConditions"] == [placement.RESERVED_CONDITION]
    assert channel["bindingFailureConditions"] == [placement.REFUSED_CONDITION]
    assert channel["attributes"][placement.HOLDER_ATTRIBUTE] == {"string": ""}
    assert "bindingConditions" not in _slice("", binding=False)["channel-0"]


def test_a_free_node_on_a_domains_turn_is_tainted_for_it_and_asks_nothing() -> None:
    channel = _slice("", turn=X)["channel-0"]
    assert channel["taints"] == [placement.taint(X)]
    assert "bindingConditions" not in channel
    # The turn holds nothing: the node still reads as free.
    assert channel["attributes"][placement.HOLDER_ATTRIBUTE] == {"string": ""}
    # A node held by a domain shows its holder whoever's turn it is.
    assert _slice(Y, turn=X)["channel-0"]["taints"] == [placement.taint(Y)]
    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
    later = now + datetime.timedelta(seconds=placement.TURN_STALE_SECONDS + 1)
    written = placement.turn_configmap(X, namespace="ns", now=now)
    assert placement.turn_of(written, now=now) == X
    # Not renewed (the controller stopped, or turns were switched off): nobody's.
    assert placement.turn_of(written, now=later) == ""
    assert placement.turn_of(placement.turn_configmap("", namespace="ns", now=now), now=now) == ""
    assert placement.turn_of(None, now=now) == ""
    assert placement.turn_of({"data": {placement.TURN_KEY: X}}, now=now) == ""


def test_only_a_claim_with_its_domains_toleration_can_use_that_domains_turn() -> None:
    claim = {"spec": {"devices": {"requests": [
        {"name": "channel", "exactly": {"tolerations": [placement.toleration(X)]}}]}}}  # fmt: skip
    assert placement.tolerates_own_hold(claim, X)
    assert not placement.tolerates_own_hold(claim, Y)
    assert not placement.tolerates_own_hold({"spec": {"devices": {"requests": [{}]}}}, X)


def test_an_unconditional_allocation_without_a_timestamp_counts_from_its_claims_creation() -> None:
    # API servers before 1.36 drop the stamp: the claims' creation times order them there.
    older, newer = _claim("a", X, binding=False), _claim("b", Y, binding=False, at="t0")
    for claim, created in ((older, "t1"), (newer, "t2")):
        del claim["status"]["allocation"]["allocationTimestamp"]
        claim["metadata"]["creationTimestamp"] = created
    assert placement.holder(recorded="", allocations=[_parsed(newer), _parsed(older)]) == X


def test_the_template_tolerates_and_selects_only_its_own_hold() -> None:
    assert placement.toleration(X) == {
        "key": placement.HOLD_TAINT_KEY, "operator": "Equal", "value": X, "effect": "NoSchedule"
    }  # fmt: skip
    expression = placement.selector(X)
    assert f'in ["", "{X}"]' in expression
    assert expression.startswith(f'!("{placement.HOLDER_ATTRIBUTE}" in device.attributes[')


def _parsed(claim: dict[str, Any]) -> placement.ChannelAllocation:
    parsed = placement.parse_claim(claim)
    assert parsed is not None
    return parsed


@pytest.mark.parametrize(
    ("claim", "pending", "granted", "refused"),
    [
        (_claim("c1", X), True, False, False),
        (_claim("c1", X, conditions=((placement.RESERVED_CONDITION, "True"),)), False, True, False),
        (_claim("c1", X, conditions=((placement.REFUSED_CONDITION, "True"),)), False, False, True),
        (
            _claim("c1", X, conditions=((placement.RESERVED_CONDITION, "False"),)),
            True,
            False,
            False,
        ),
        (_claim("c1", X, binding=False), False, False, False),
    ],
)
def test_claims_read_as_pending_granted_or_refused(
    claim: dict[str, Any], pending: bool, granted: bool, refused: bool
) -> None:
    parsed = _parsed(claim)
    assert (parsed.pending, parsed.granted, parsed.refused) == (pending, granted, refused)
    assert (parsed.domain_uid, parsed.node, parsed.devices) == (X, "n1", ("channel-0",))


def test_claims_without_our_channel_devices_are_not_placement_facts() -> None:
    assert placement.parse_claim(_claim("c1", X, device=devices.DAEMON_DEVICE)) is None
    assert placement.parse_claim({"metadata": {"uid": "c1"}}) is None


GRANTED = ((placement.RESERVED_CONDITION, "True"),)


@pytest.mark.parametrize(
    ("recorded", "claims", "expected"),
    [
        # first come, first served; the later domain is placed elsewhere
        ("", [_claim("a", X, at="t1"), _claim("b", Y, at="t2")], {"a": True, "b": False}),
        ("", [_claim("b", Y, at="t2"), _claim("a", X, at="t1")], {"a": True, "b": False}),
        # the same domain's claims share the node
        ("", [_claim("a", X, at="t1"), _claim("b", X, at="t2")], {"a": True, "b": True}),
        # the record wins over any claim; an earlier grant wins over a pending claim
        (Y, [_claim("a", X, at="t1"), _claim("b", Y, at="t2")], {"a": False, "b": True}),
        ("", [_claim("a", X, at="t2", conditions=GRANTED), _claim("b", Y, at="t1")], {"b": False}),
        # a claim of a domain that is gone is refused
        ("", [_claim("a", Z, at="t1"), _claim("b", Y, at="t2")], {"a": False, "b": True}),
        # a claim naming no domain holds nothing: bound, for the plugin to refuse it
        ("", [_claim("a", "", at="t1"), _claim("b", Y, at="t2")], {"a": True, "b": True}),
        # nothing pending, nothing to answer
        ("", [_claim("a", X, conditions=GRANTED)], {}),
        # a claim that took the node on its domain's turn (no binding conditions) holds it,
        # even when the other claim's allocation is stamped earlier
        ("", [_claim("a", X, at="t2", binding=False), _claim("b", Y, at="t1")], {"b": False}),
    ],
)
def test_who_gets_a_free_node(
    recorded: str, claims: list[dict[str, Any]], expected: dict[str, bool]
) -> None:
    answers = decide.decide(
        node="n1", recorded=recorded, allocations=[_parsed(c) for c in claims], domains=NAMES
    )
    assert {a.allocation.uid: a.granted for a in answers} == expected
    for answer in answers:
        refusals = set(placement.RefusalReason)
        assert (
            answer.reason == placement.RESERVED_REASON
            if answer.granted
            else answer.reason in refusals
        )


def test_a_foreign_claim_is_refused_as_a_missing_domain_and_holds_nothing() -> None:
    """A claim of another namespace naming X's UID: the binder refuses it as it would a
    claim for no domain at all, and X's later claim gets the free node."""
    foreign = _parsed(_claim("f", X, at="t1"))
    own = _parsed(_claim("a", X, at="t2"))
    answers = decide.decide(
        node="n1", recorded="", allocations=[own], domains=NAMES, foreign=[foreign]
    )
    assert {a.allocation.uid: a.granted for a in answers} == {"f": False, "a": True}
    refusal = next(a for a in answers if not a.granted)
    missing = decide.decide(
        node="n1", recorded="", allocations=[_parsed(_claim("f", Z, at="t1"))], domains=NAMES
    )[0]
    assert (refusal.reason, refusal.message) == (
        missing.reason,
        missing.message.replace(Z, X),
    )
    assert "a/x" not in refusal.message


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        pytest.param({"d1": frozenset({"n1", "n2"})}, "d1", id="named a member"),
        pytest.param({"d1": frozenset({"n2"})}, "", id="listed elsewhere only"),
        pytest.param({"d1": None}, "", id="an object naming no members"),
        pytest.param({"d1": frozenset({"n1"}), "d2": frozenset({"n1"})}, "", id="two claim it"),
        pytest.param({"d1": frozenset({"n1"}), "d2": frozenset()}, "d1", id="one of two"),
    ],
)
def test_the_record_names_the_domain_whose_clique_object_names_the_node(
    named: dict[str, frozenset[str] | None], expected: str
) -> None:
    cliques = {uid: _clique_object(uid, members) for uid, members in named.items()}
    assert placement.recorded_holder("n1", cliques) == expected


def test_objects_from_a_controller_without_the_record_leave_the_label_to_say() -> None:
    legacy = {X: _clique_object(X, None)}  # a release before the record, after a rollback
    assert placement.recorded_holder("n1", legacy, legacy_label=Y) == Y
    # One object keeping the record is enough: the label decides nothing then.
    kept = {**legacy, Y: _clique_object(Y, frozenset({"n2"}))}
    assert placement.recorded_holder("n1", kept, legacy_label=Y) == ""
    assert placement.recorded_holder("n1", {}, legacy_label=Y) == ""  # no object: no record


def test_a_label_whose_domains_object_keeps_no_record_says_whatever_other_objects_name() -> None:
    """A rollback to 0.1.x leaves this release's OnDelete agents running beside a controller
    that keeps no record: objects written before still name members, stale from then on, while
    the objects of the domains it forms name none. The label of such a domain says."""
    stale = {X: _clique_object(X, frozenset({"n1", "n2"})), Y: _clique_object(Y, None)}
    assert placement.recorded_holder("n3", stale, legacy_label=Y) == Y  # a new domain's node
    assert placement.recorded_holder("n1", stale, legacy_label=Y) == Y  # one that moved
    assert placement.recorded_holder("n1", stale, legacy_label="") == X  # no label: the record
    assert placement.recorded_member("n3", stale, legacy_label=Y)
    # Where the label's domain keeps a record (every object of this release), the label says
    # nothing: a stale label, or one set by hand, admits no node.
    kept = {X: _clique_object(X, frozenset({"n1"})), Y: _clique_object(Y, frozenset())}
    assert placement.recorded_holder("n1", kept, legacy_label=Y) == X
    assert placement.recorded_holder("n3", kept, legacy_label=Y) == ""


def test_an_agent_waits_for_the_record_the_label_and_a_slot_left_to_let_go() -> None:
    recorded = {X: _clique_object(X, frozenset({"n1"}))}
    assert placement.occupant("n1", recorded, label=Y) == X  # the record first
    empty = {X: _clique_object(X, frozenset())}
    assert placement.occupant("n1", empty, label=Y) == Y  # a label not cleaned up yet
    left = {X: {**_clique_object(X, frozenset()), "daemons": [{"nodeName": "n1"}]}}
    assert placement.occupant("n1", left) == X  # its slot until IMEX stopped
    assert placement.occupant("n2", left) == ""
    # Its clique label changed (or went): an object of its old clique still counts.
    old_clique = [(Y, _clique_object(Y, frozenset({"n2"})))]
    assert placement.occupant("n2", {}, everywhere=old_clique) == Y


def _clique_object(uid: str, members: frozenset[str] | None) -> dict[str, Any]:
    annotations = {}
    if members is not None:
        annotations[constants.CLIQUE_MEMBERS_ANNOTATION] = models.clique_members_value(members)
    return {"metadata": {"name": f"{uid}.c1", "annotations": annotations}}


def test_the_holder_is_the_record_else_the_first_grant() -> None:
    first = _parsed(_claim("a", X, at="t1", conditions=GRANTED))
    second = _parsed(_claim("b", Y, at="t2", conditions=GRANTED))
    assert placement.holder(recorded="", allocations=[second, first]) == X
    assert placement.holder(recorded=Y, allocations=[first]) == Y
    assert placement.holder(recorded="", allocations=[_parsed(_claim("c", X))]) == ""
    took = _parsed(_claim("d", Y, at="t0", binding=False))
    assert placement.holder(recorded="", allocations=[first, took]) == Y


def test_the_answer_is_written_for_every_allocated_device_and_keeps_others() -> None:
    claim = _parsed(_claim("a", X))
    other = {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0", "conditions": []}
    status = {"allocation": {"x": 1}, "devices": [other]}
    written = placement.answered_status(
        status, claim, granted=False, reason="R", message="m", now="t"
    )
    assert written["allocation"] == {"x": 1}
    assert written["devices"][0] == other
    (ours,) = written["devices"][1:]
    assert (ours["pool"], ours["device"]) == ("n1", "channel-0")
    assert ours["conditions"][0]["type"] == placement.REFUSED_CONDITION
    assert status["devices"] == [other]  # not changed in place


@pytest.mark.parametrize(
    ("label", "claim", "member"),
    [
        (X, Claim.HELD, True),
        ("", Claim.HELD, True),  # forming while the scheduler waits in PreBind
        (Y, Claim.HELD, True),  # the label is the record's copy: it decides nothing
        (X, Claim.ALLOCATED, False),  # another domain holds the node
        (X, Claim.NONE, False),  # a label alone admits nobody
    ],
)
def test_membership_needs_the_hold_and_a_claim_on_the_node(
    label: str, claim: Claim, member: bool
) -> None:
    info = NodeInfo(name=NodeName("n1"), domain=label, clique="c.1", claim=claim)
    assert info.member is member


@pytest.mark.parametrize(
    ("claim", "holder", "stranded"),
    [
        (_claim("a", X, binding=False), Y, True),  # another domain took the node first
        (_claim("a", X, binding=False), X, False),
        (_claim("a", X, binding=False), "", False),
        (_claim("a", X), Y, False),  # binding conditions: the binder answers it instead
        # granted, while another domain's claim had taken the node on a turn
        (_claim("a", X, conditions=GRANTED), Y, True),
        (_claim("a", X, conditions=GRANTED), X, False),
        (_claim("a", X, conditions=((placement.REFUSED_CONDITION, "True"),)), Y, False),
    ],
)
def test_a_claim_is_stranded_where_another_domain_holds_its_node(
    claim: dict[str, Any], holder: str, stranded: bool
) -> None:
    assert placement.stranded(_parsed(claim), holder=holder) is stranded


def test_a_template_from_before_placement_is_replaced() -> None:
    dom = snapshots.domain()
    current = objects.workload_template(dom)
    assert objects.template_current(cast(dict[str, Any], current), dom)
    old = copy.deepcopy(cast(dict[str, Any], current))
    del old["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    assert not objects.template_current(old, dom)
    plan = decide_domain.plan(
        dataclasses.replace(snapshots.snapshot(), template_outdated=True), limit=18,
        reported=frozenset(),
    )  # fmt: skip
    assert plan.delete_template and not plan.create_template


def test_a_forged_label_gets_no_slot_and_one_warning() -> None:
    forged = snapshots.node("n1", claim=Claim.NONE)
    plan = decide_domain.plan(
        snapshots.snapshot(nodes=[forged, snapshots.node("n2")]), limit=18, reported=frozenset()
    )
    listed = {d.node_name for ds in plan.cliques.values() for d in ds}
    assert listed == {"n2"}
    warnings = [e for e in plan.status_events if e.reason == "NodeLabelWithoutClaim"]
    assert len(warnings) == 1 and "n1" in warnings[0].message and warnings[0].warning
    again = decide_domain.plan(
        snapshots.snapshot(nodes=[forged, snapshots.node("n2")]), limit=18, reported=plan.reported
    )
    assert not [e for e in again.status_events if e.reason == "NodeLabelWithoutClaim"]


def test_a_claim_with_an_unreadable_config_is_still_a_channel_claim() -> None:
    request = {"name": "channel", "exactly": {"deviceClassName": constants.CHANNEL_DEVICE_CLASS}}
    by_class = {"spec": {"devices": {"requests": [request]}}}
    assert placement.asks_for_a_channel(by_class)
    assert placement.domain_of(by_class) == ""
    other = {"spec": {"devices": {"requests": [{"exactly": {"deviceClassName": "gpu"}}]}}}
    assert not placement.asks_for_a_channel(other)


def test_the_controller_and_the_plugin_read_the_same_domain_from_two_configs() -> None:
    """Review found: the controller took the first ChannelConfig, the plugin the last (DRA's
    order: a later config overrides), so a claim naming two domains was placed for one and
    prepared for the other. Both take the last now."""
    claim = _claim("c1", "d1", node="n1")
    configs = claim["status"]["allocation"]["devices"]["config"]
    second = copy.deepcopy(configs[0])
    second["opaque"]["parameters"]["domainID"] = "d2"
    configs.append(second)
    assert placement.domain_of(claim) == "d2"
    view = claims.view(claim, expected_uid="c1")
    assert claims.domain_uid(view) == "d2"
    # A last config for another request applies to neither; an unreadable last one makes
    # both find no domain (the plugin refuses the claim).
    second["requests"] = ["other"]
    assert placement.domain_of(claim) == claims.domain_uid(claims.view(claim, expected_uid="c1"))
    assert placement.domain_of(claim) == "d1"
    second["requests"] = ["channel"]
    second["opaque"]["parameters"]["bogus"] = True
    assert placement.domain_of(claim) == claims.domain_uid(claims.view(claim, expected_uid="c1"))
    assert placement.domain_of(claim) == ""
