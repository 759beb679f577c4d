"""node-init's hold decision: a usable verdict outlives a passing fault, for a bounded grace,
on a node the membership record (or the plugin's prepared claims) puts in a domain."""

from __future__ import annotations

from typing import Any

import pytest

from computedomains import flags
from computedomains.api import constants
from computedomains.api.fabricverdict import Grace, VerdictKind
from computedomains.fabric.model import Reason, Verdict
from computedomains.nodeinit import hold, settings

CLIQUE = "386b0bf3-73f0-5054-949b-d5b6149cb09f.32766"
HEALTHY = Verdict(VerdictKind.HEALTHY, Reason.HEALTHY, "4 GPUs registered", clique=CLIQUE)
DEGRADED = Verdict(VerdictKind.DEGRADED, Reason.DEGRADED, "slow links", clique=CLIQUE)
NO_FABRIC = Verdict(VerdictKind.NO_FABRIC, Reason.NO_FABRIC, "no fabric")
NVML_ERROR = Verdict(VerdictKind.BROKEN, Reason.DISCOVERY_FAILED, "NVML query failed: Unknown")
REGISTERING = Verdict(VerdictKind.TRANSITIONAL, Reason.IN_PROGRESS, "registration IN_PROGRESS")
FAILED = Verdict(VerdictKind.BROKEN, Reason.FAILED, "registration failed")
TIMED_OUT = Verdict(VerdictKind.BROKEN, Reason.TIMED_OUT, "still IN_PROGRESS after 300s")
MIXED = Verdict(VerdictKind.INCONSISTENT, Reason.INCONSISTENT, "GPUs disagree")
GRACE = Grace(checks=3, seconds=180)
NOW = 1000.0

Publish, Hold, Degrade = hold.Action.PUBLISH, hold.Action.HOLD, hold.Action.DEGRADE
Sustained, Unusable = hold.EventReason.FAULT_SUSTAINED, hold.EventReason.UNUSABLE


def _spell(failures: int, ago: float = 0.0) -> hold.Spell:
    return hold.Spell(since=NOW - ago, failures=failures)


@pytest.mark.parametrize(
    ("verdict", "published_usable", "in_domain", "spell", "action", "carried", "event"),
    [
        # A usable verdict is published, whatever came before; a fault in progress ends.
        (HEALTHY, True, True, None, Publish, None, None),
        (HEALTHY, True, True, _spell(2, 60), Publish, None, None),
        (DEGRADED, False, True, None, Publish, None, None),
        (NO_FABRIC, True, False, None, Publish, None, None),
        # Nothing usable is published: there is nothing to hold, and nothing to warn about.
        (NVML_ERROR, False, True, None, Publish, None, None),
        (FAILED, False, True, None, Publish, None, None),
        # In a domain, a passing fault holds the verdict: the first check starts the spell...
        (NVML_ERROR, True, True, None, Hold, _spell(1), None),
        (REGISTERING, True, True, None, Hold, _spell(1), None),
        # ... later ones extend it (an NVML error and a registration count alike) ...
        (REGISTERING, True, True, _spell(1, 60), Hold, _spell(2, 60), None),
        (NVML_ERROR, True, True, _spell(1, 170), Hold, _spell(2, 170), None),
        # ... until K checks in a row failed, or N seconds passed, whichever comes first.
        (NVML_ERROR, True, True, _spell(2, 10), Degrade, None, Sustained),
        (REGISTERING, True, True, _spell(1, 180), Degrade, None, Sustained),
        # Waiting does not fix these: published at once, in a domain or not.
        (FAILED, True, True, None, Degrade, None, Unusable),
        (TIMED_OUT, True, True, _spell(1, 60), Degrade, None, Unusable),
        (MIXED, True, True, None, Degrade, None, Unusable),
        # No job on the node: nothing to protect, the fault shows at once.
        (NVML_ERROR, True, False, None, Degrade, None, Unusable),
        (REGISTERING, True, False, None, Degrade, None, Unusable),
    ],
)
def test_decide(
    verdict: Verdict,
    published_usable: bool,
    in_domain: bool,
    spell: hold.Spell | None,
    action: hold.Action,
    carried: hold.Spell | None,
    event: hold.EventReason | None,
) -> None:
    decision = hold.decide(
        verdict,
        published_usable=published_usable,
        in_domain=in_domain,
        spell=spell,
        now=NOW,
        grace=GRACE,
    )
    assert (decision.action, decision.spell) == (action, carried)
    assert (decision.event.reason if decision.event else None) == event


def test_a_single_check_of_grace_degrades_on_the_first_failure() -> None:
    decision = hold.decide(
        NVML_ERROR,
        published_usable=True,
        in_domain=True,
        spell=None,
        now=NOW,
        grace=Grace(checks=1, seconds=180),
    )
    assert decision.action is Degrade


def test_messages_say_why() -> None:
    held = hold.decide(
        NVML_ERROR, published_usable=True, in_domain=True, spell=None, now=NOW, grace=GRACE
    )
    assert held.note.startswith("keeping the last usable verdict") and "1 of 3" in held.note
    degraded = hold.decide(
        NVML_ERROR,
        published_usable=True,
        in_domain=True,
        spell=_spell(2, 42),
        now=NOW,
        grace=GRACE,
    )
    assert degraded.event is not None
    assert "failed 3 times in a row over 42s" in degraded.event.message
    assert "FabricDiscoveryFailed (NVML query failed: Unknown)" in degraded.event.message
    passed = hold.decide(
        HEALTHY, published_usable=True, in_domain=True, spell=_spell(2, 60), now=NOW, grace=GRACE
    )
    assert passed.note == "the fault passed after 2 failed check(s)"
    quiet = hold.decide(
        HEALTHY, published_usable=True, in_domain=True, spell=None, now=NOW, grace=GRACE
    )
    assert quiet.note == ""


def test_node_init_takes_the_grace_flags() -> None:
    defaults = flags.parse(settings.Settings, ["--node-name=n"])
    assert defaults.fault_grace == Grace(checks=3, seconds=180)
    argv = ["--node-name=n", "--fault-grace-checks=5", "--fault-grace-seconds=30"]
    chosen = flags.parse(settings.Settings, argv)
    assert chosen.fault_grace == Grace(checks=5, seconds=30)


def _clique_object(*members: str) -> dict[str, Any]:
    """A clique object naming ``members`` (none given: one from a controller without a record)."""
    annotations = {constants.CLIQUE_MEMBERS_ANNOTATION: ",".join(members)} if members else {}
    return {"metadata": {"annotations": annotations}}


RECORDED = {"d1": _clique_object("n1", "n2")}
OTHERS = {"d1": _clique_object("n2", "n3")}
NOBODY: dict[str, dict[str, Any]] = {"d1": {"metadata": {"annotations": {
    constants.CLIQUE_MEMBERS_ANNOTATION: ""}}}}  # fmt: skip
MOVING = {"d1": _clique_object("n1"), "d2": _clique_object("n1", "n2")}
UNRECORDED = {"d1": _clique_object()}


@pytest.mark.parametrize(
    ("clique", "cliques", "label", "held", "expected"),
    [
        # The record names the node: in a domain, whether or not the label copy was written.
        (CLIQUE, RECORDED, "", False, True),
        (CLIQUE, RECORDED, "d1", False, True),
        # Two objects name it while it moves between domains: in one of them either way.
        (CLIQUE, MOVING, "", False, True),
        # The record names others or nobody: a label left behind holds nothing.
        (CLIQUE, OTHERS, "d1", False, False),
        (CLIQUE, NOBODY, "d1", False, False),
        (CLIQUE, {}, "d1", False, False),
        # The kubelet plugin's prepared claims hold the node: in, whatever the record says yet.
        (CLIQUE, {}, "", True, True),
        (CLIQUE, OTHERS, "", True, True),
        # Where the record cannot say, the label does: a controller that keeps no record...
        (CLIQUE, UNRECORDED, "d1", False, True),
        (CLIQUE, UNRECORDED, "", False, False),
        # ... or a node in no clique (no fabric), of which no clique object speaks.
        ("", {}, "d1", False, True),
        ("", {}, "", False, False),
    ],
)
def test_in_domain_asks_the_record_and_the_prepared_claims_before_the_label(
    clique: str, cliques: dict[str, dict[str, Any]], label: str, held: bool, expected: bool
) -> None:
    found = hold.in_domain("n1", clique=clique, cliques=cliques, label=label, held=held)
    assert found is expected


@pytest.mark.parametrize(
    ("verdict", "published_usable", "asks"),
    [
        (NVML_ERROR, True, True),
        (REGISTERING, True, True),
        (NVML_ERROR, False, False),  # nothing usable to hold
        (HEALTHY, True, False),  # nothing to hold through
        (FAILED, True, False),  # published at once, in a domain or not
    ],
)
def test_membership_is_asked_only_where_the_decision_turns_on_it(
    verdict: Verdict, published_usable: bool, asks: bool
) -> None:
    assert hold.asks_membership(verdict, published_usable=published_usable) is asks
    decisions = {
        hold.decide(verdict, published_usable=published_usable, in_domain=member, spell=None,
                    now=NOW, grace=GRACE).action
        for member in (True, False)
    }  # fmt: skip
    assert (len(decisions) == 2) is asks
