"""Uninstall's pure decisions (hooks/cleanup.py): the refusal and what is removed per node."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from typing import Any

import pytest

from computedomains.api import constants, resources
from computedomains.api.domainview import Domain, DomainUID
from computedomains.hooks import cleanup, uninstall
from computedomains.hooks.compat import GFD_LABEL
from computedomains.hooks.report import Report, Severity


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


RECORD = "sh.helm.release.v1.cd.v1"


def _record(status: str, *, name: str = "cd", owner: str = "helm") -> cleanup.ReleaseRecord:
    """Helm's record of revision 1 of release ``name``, labelled as Helm labels it."""
    return cleanup.ReleaseRecord(RECORD, {"owner": owner, "name": name, "status": status})


@pytest.mark.parametrize(
    ("record", "argo_tracked", "required", "severity"),
    [
        # Helm runs the pre-delete hook only after it marked the release uninstalling.
        (_record("uninstalling"), False, True, Severity.OK),
        # A render applied beside a live Helm release of the same name: its record is there
        # (helm template renders revision 1) but the release is not going away.
        (_record("deployed"), False, True, Severity.FAIL),
        (_record("superseded"), False, True, Severity.FAIL),
        (_record("failed"), False, True, Severity.FAIL),
        # Not Helm's record of this release: as if there were none.
        (_record("uninstalling", name="other"), False, True, Severity.WARN),
        (_record("uninstalling", owner=""), False, True, Severity.WARN),
        (None, False, True, Severity.WARN),
        # Argo CD deleting its Application, with or without a Helm record of the same name.
        (None, True, True, Severity.OK),
        (_record("deployed"), True, True, Severity.OK),
        # uninstall.requireOwner=false, or run by hand.
        (_record("deployed"), False, False, Severity.INFO),
        (None, False, False, Severity.INFO),
    ],
)
def test_uninstall_acts_only_while_its_own_release_is_going_away(
    record: cleanup.ReleaseRecord | None, argo_tracked: bool, required: bool, severity: Severity
) -> None:
    f = cleanup.uninstalling(
        release="cd", record=record, argo_tracked=argo_tracked, required=required
    )
    assert f.severity is severity, f.message


def test_each_refusal_says_why_and_what_to_do() -> None:
    live = cleanup.uninstalling(
        release="cd", record=_record("deployed"), argo_tracked=False, required=True
    )
    assert f"record {RECORD} says 'deployed', not 'uninstalling'" in live.message
    assert "hooks.enabled=false" in live.fix and "`helm upgrade cd <chart> --reuse-values`" in (
        live.fix
    )
    rendered = cleanup.uninstalling(release="cd", record=None, argo_tracked=False, required=True)
    assert rendered.message.startswith("not an uninstall") and "hooks.enabled=false" in (
        rendered.fix
    )


@dataclasses.dataclass
class _Api:
    """The objects the uninstall hook may read, by path; every write is recorded."""

    objects: dict[str, dict[str, Any]]
    writes: list[str] = dataclasses.field(default_factory=list)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def list_items(self, path: str, *, label_selector: str = "") -> Iterator[dict[str, Any]]:
        return iter(())

    def delete(self, path: str, *, propagation: str = "Background") -> bool:
        self.writes.append(f"DELETE {path}")
        return True


def test_a_render_beside_a_live_helm_release_of_its_name_changes_nothing() -> None:
    """The Job names the record of revision 1, which the live release has: not its uninstall."""
    labels = {"owner": "helm", "name": "cd", "status": "deployed", "version": "1"}
    secret = {"metadata": {"name": RECORD, "labels": labels}}
    api = _Api({resources.SECRETS.path(RECORD, namespace="cd-system"): secret})
    settings = uninstall.Settings(
        release="cd", namespace="cd-system", release_record=RECORD,
        job="cd-compute-domains-hook-uninstall", require_owner=True, force=False,
        hook_jobs=("cd-compute-domains-hook-migrate",), timeout_seconds=1.0,
    )  # fmt: skip
    out = io.StringIO()
    code = uninstall.run(api, settings, Report("uninstall", out))
    assert code == 1 and api.writes == [], out.getvalue()
    assert "says 'deployed'" in out.getvalue()


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
