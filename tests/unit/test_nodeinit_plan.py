"""node-init's pure decision: what to change on a Node for a verdict."""

from __future__ import annotations

from computedomains.api import constants
from computedomains.api.fabricverdict import VerdictKind
from computedomains.fabric.model import Reason, Verdict
from computedomains.kube.nodes import Condition, NodeView, Taint
from computedomains.nodeinit import plan

CLIQUE = "386b0bf3-73f0-5054-949b-d5b6149cb09f.32766"
HEALTHY = Verdict(VerdictKind.HEALTHY, Reason.HEALTHY, "4 GPUs registered", clique=CLIQUE)
BROKEN = Verdict(VerdictKind.BROKEN, Reason.FAILED, "registration failed")
NO_FABRIC = Verdict(VerdictKind.NO_FABRIC, Reason.NO_FABRIC, "no fabric")
TAINT = Taint(constants.FABRIC_TAINT, plan.TAINT_EFFECT)
OTHER_TAINT = Taint("example.com/maintenance", "NoExecute")


def _node(
    labels: dict[str, str] | None = None,
    conditions: tuple[Condition, ...] = (),
    taints: tuple[Taint, ...] = (),
) -> NodeView:
    return NodeView("n", labels or {}, conditions, taints)


def _condition(verdict: Verdict, status: str) -> Condition:
    return Condition(constants.FABRIC_CONDITION, status, verdict.reason.value, verdict.message)


def test_healthy_node_gets_label_and_condition_and_loses_a_stale_taint() -> None:
    todo = plan.plan(
        HEALTHY, _node({constants.CLIQUE_LABEL: "old.1"}, taints=(TAINT,)), taint_broken=True
    )
    assert todo.labels == {constants.CLIQUE_LABEL: CLIQUE}
    assert todo.condition == plan.ConditionUpdate("True", "FabricHealthy", "4 GPUs registered")
    assert (todo.remove_condition, todo.taint) == (False, False)


def test_matching_node_needs_nothing() -> None:
    node = _node({constants.CLIQUE_LABEL: CLIQUE}, (_condition(HEALTHY, "True"),), (OTHER_TAINT,))
    assert plan.plan(HEALTHY, node, taint_broken=True) == plan.Plan({}, None, False, None)
    assert plan.plan(HEALTHY, node, taint_broken=True).describe() == []


def test_broken_node_loses_its_label_and_is_tainted_when_enabled() -> None:
    node = _node({constants.CLIQUE_LABEL: CLIQUE}, (_condition(HEALTHY, "True"),))
    todo = plan.plan(BROKEN, node, taint_broken=True)
    assert todo.labels == {constants.CLIQUE_LABEL: None}
    assert todo.condition is not None and todo.condition.status == "False"
    assert todo.taint is True
    assert plan.plan(BROKEN, node, taint_broken=False).taint is None


def test_failed_discovery_never_taints() -> None:
    failed = Verdict(VerdictKind.BROKEN, Reason.DISCOVERY_FAILED, "libnvidia-ml.so.1 not found")
    assert plan.plan(failed, _node(), taint_broken=True).taint is None
    assert plan.plan(failed, _node(taints=(TAINT,)), taint_broken=True).taint is False


def test_node_without_fabric_only_loses_what_node_init_put_there() -> None:
    assert plan.plan(NO_FABRIC, _node(taints=(OTHER_TAINT,)), taint_broken=True) == plan.Plan(
        {}, None, False, None
    )
    stale = _node({constants.CLIQUE_LABEL: CLIQUE}, (_condition(BROKEN, "False"),), (TAINT,))
    todo = plan.plan(NO_FABRIC, stale, taint_broken=True)
    assert todo == plan.Plan({constants.CLIQUE_LABEL: None}, None, True, False)
    assert len(todo.describe()) == 3
