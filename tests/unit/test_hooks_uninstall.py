"""Uninstall's pure decisions (hooks/cleanup.py): the refusal and what is removed per node."""

from __future__ import annotations

from typing import Any

from computedomains.api import constants
from computedomains.api.domainview import Domain, DomainUID
from computedomains.hooks import cleanup
from computedomains.hooks.compat import GFD_LABEL
from computedomains.hooks.report import Severity


def _domain(namespace: str, name: str, template: str, finalizers: tuple[str, ...]) -> Domain:
    uid = DomainUID(f"uid-{name}")
    return Domain(uid=uid, name=name, namespace=namespace, template=template, finalizers=finalizers)


DOMAIN = _domain("team-a", "train", "train-channel", (constants.FINALIZER, "other/x"))


def test_refuses_naming_the_domains_and_their_running_pods() -> None:
    pods = [
        cleanup.Pod("team-a", "worker-0", "Running", ("train-channel",)),
        cleanup.Pod("team-a", "worker-1", "Pending", ("train-channel",)),
        cleanup.Pod("team-a", "done", "Succeeded", ("train-channel",)),
        cleanup.Pod("team-b", "elsewhere", "Running", ("train-channel",)),
    ]
    f = cleanup.check_live([DOMAIN], pods, force=False, release="cd")
    assert f.severity is Severity.FAIL
    assert (
        f.message == "1 ComputeDomain(s) have running pods: team-a/train (pods: worker-0, worker-1)"
    )
    assert "uninstall.force=true" in f.fix and "`helm rollback cd`" in f.fix
    forced = cleanup.check_live([DOMAIN], pods, force=True, release="cd")
    assert forced.severity is Severity.WARN and "team-a/train" in forced.message


def test_no_running_pods_no_refusal() -> None:
    pods = [cleanup.Pod("team-a", "done", "Failed", ("train-channel",))]
    assert cleanup.check_live([DOMAIN], pods, force=False, release="cd").severity is Severity.OK


def test_only_our_finalizer_goes() -> None:
    assert cleanup.finalizers_without_ours(DOMAIN) == ["other/x"]
    assert cleanup.finalizers_without_ours(_domain("a", "b", "c", ("other/x",))) is None


def test_node_cleanup_removes_ours_and_leaves_gfds_clique_label() -> None:
    taints = (
        {"key": constants.FABRIC_TAINT, "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    )
    labels = {constants.COMPUTE_DOMAIN_LABEL: "uid", constants.CLIQUE_LABEL: "u.1"}
    todo = cleanup.node_cleanup(cleanup.NodeState("n", labels, has_condition=True, taints=taints))
    assert todo.labels == (constants.COMPUTE_DOMAIN_LABEL, constants.CLIQUE_LABEL)
    assert todo.condition and todo.taints == [taints[1]]
    assert todo.describe() == (
        "label resource.nvidia.com/computeDomain, label nvidia.com/gpu.clique, "
        "condition NVLinkFabricReady, taint computedomains.io/nvlink-fabric-broken"
    )
    gfd = cleanup.node_cleanup(
        cleanup.NodeState("n", {**labels, GFD_LABEL: "1"}, has_condition=True, taints=())
    )
    assert gfd.labels == (constants.COMPUTE_DOMAIN_LABEL,) and gfd.taints is None
    never_judged = cleanup.node_cleanup(
        cleanup.NodeState("n", {constants.CLIQUE_LABEL: "u.1"}, has_condition=False, taints=())
    )
    assert never_judged.empty


def test_uninstall_acts_only_when_helm_or_argo_cd_runs_it() -> None:
    helm = cleanup.uninstalling(helm_record=True, argo_tracked=False, required=True)
    argo = cleanup.uninstalling(helm_record=False, argo_tracked=True, required=True)
    assert helm.severity is argo.severity is Severity.OK
    rendered = cleanup.uninstalling(helm_record=False, argo_tracked=False, required=True)
    assert rendered.severity is Severity.WARN and rendered.message.startswith("not an uninstall")
    assert "hooks.enabled=false" in rendered.fix
    unchecked = cleanup.uninstalling(helm_record=False, argo_tracked=False, required=False)
    assert unchecked.severity is Severity.INFO


def test_pods_a_stop_left_are_named_with_their_node_and_state() -> None:
    terminating: dict[str, Any] = {
        "metadata": {"name": "plugin-a", "deletionTimestamp": "2026-12-04T04:00:00Z",
                     "finalizers": ["example.com/keep"]},
        "spec": {"nodeName": "gb200-r0-n01"},
    }  # fmt: skip
    pending: dict[str, Any] = {"metadata": {"name": "agent-b"}, "spec": {},
                               "status": {"phase": "Pending"}}  # fmt: skip
    more = [{"metadata": {"name": f"p{i}"}, "spec": {"nodeName": "n"}} for i in range(5)]
    pods = [terminating, pending, *more]
    text = cleanup.remaining_pods(pods)
    assert text.startswith("7 pod(s): plugin-a on gb200-r0-n01 (terminating since "
                           "2026-12-04T04:00:00Z, finalizers ['example.com/keep']); "
                           "agent-b on no node (Pending, not deleted); ")  # fmt: skip
    assert text.endswith(" and 2 more")
