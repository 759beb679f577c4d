"""The hook Jobs and their RBAC render as hooks for Helm and Argo CD alike, one value at a time."""

from __future__ import annotations

import argparse
import importlib

import pytest

from computedomains import flags
from computedomains.api import placement
from tests.chart import rendering as r
from tests.support import helm

HOOKS = {
    # hook: (Helm events, Argo CD hook, Job weight)
    "preflight": ("pre-install,pre-upgrade,pre-rollback", "PreSync", 0),
    "migrate": ("post-install,post-upgrade", "PostSync", 0),
    "roll-agents": ("post-upgrade", "PostSync", 2),
    "verify": ("post-install,post-upgrade", "PostSync", 10),
    "uninstall": ("pre-delete", "PreDelete", 0),
}
SWITCH = {"roll-agents": "imexAgent.rollIdleNodes"}
"""The value that turns a hook off, where it is not ``<hook>.enabled``."""
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def _name(hook: str) -> str:
    return f"{r.RELEASE}-compute-domains-hook-{hook}"


def _job(objects: list[r.Obj], hook: str) -> r.Obj:
    return r.find(objects, "Job", _name(hook))


def _args(objects: list[r.Obj], hook: str) -> list[str]:
    args: list[str] = _job(objects, hook)["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _hook_objects(objects: list[r.Obj], hook: str) -> list[r.Obj]:
    return [o for o in objects if o["metadata"]["name"] == _name(hook)]


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_each_hook_is_a_helm_and_argo_hook_with_rbac_below_it(h: helm.Helm, hook: str) -> None:
    objects = r.template(h)
    events, argo, weight = HOOKS[hook]
    job = _job(objects, hook)
    a = job["metadata"]["annotations"]
    assert (a["helm.sh/hook"], a["argocd.argoproj.io/hook"]) == (events, argo)
    assert a["helm.sh/hook-weight"] == a["argocd.argoproj.io/sync-wave"] == str(weight)
    rbac = [o for o in _hook_objects(objects, hook) if o["kind"] in RBAC_KINDS]
    assert {o["kind"] for o in rbac} >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    for o in rbac:
        oa = o["metadata"]["annotations"]
        assert oa["helm.sh/hook"] == events and oa["argocd.argoproj.io/hook"] == argo
        assert int(oa["helm.sh/hook-weight"]) < weight
        assert oa["argocd.argoproj.io/sync-wave"] == oa["helm.sh/hook-weight"]
        assert oa["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert oa["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation,HookSucceeded"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == _name(hook)


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_each_hook_pod_is_locked_down_and_carries_the_chart_labels(
    h4: helm.Helm, hook: str
) -> None:
    job = _job(r.template(h4), hook)
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 600
    pod = job["spec"]["template"]
    for label in r.STANDARD_LABELS:
        assert label in pod["metadata"]["labels"], label
    assert pod["metadata"]["labels"][r.COMPONENT] == f"hook-{hook}"
    assert pod["spec"]["restartPolicy"] == "Never"
    c = pod["spec"]["containers"][0]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
    assert not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"]
    assert c["command"] == ["computedomains"]
    assert c["args"][:3] == ["hooks", hook, f"--namespace={r.NAMESPACE}"]


def test_job_delete_policies_keep_logs_except_uninstall(h4: helm.Helm) -> None:
    objects = r.template(h4)
    policies = {
        hook: _job(objects, hook)["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
        for hook in HOOKS
    }
    assert policies == {
        "preflight": "before-hook-creation",
        "migrate": "before-hook-creation",
        "roll-agents": "before-hook-creation",
        "verify": "before-hook-creation",
        "uninstall": "before-hook-creation,hook-succeeded",
    }


def test_every_rendered_hook_command_line_parses(h4: helm.Helm) -> None:
    # What the templates pass is what the hooks accept (migrate once it is registered).
    objects = r.template(
        h4,
        "--set",
        "adopt.enabled=true",
        "--set",
        "uninstall.force=true",
    )
    for hook in sorted(HOOKS):
        module = f"computedomains.hooks.{hook.replace('-', '')}"
        parser = argparse.ArgumentParser()
        settings = importlib.import_module(module).Settings
        flags.add_to(parser, settings)
        parsed = flags.build(settings, parser.parse_args(_args(objects, hook)[2:]))
        assert parsed.namespace == r.NAMESPACE
        assert hook in ("migrate", "roll-agents") or parsed.release == r.RELEASE


def test_preflight_gets_the_values_it_checks(h4: helm.Helm) -> None:
    args = _args(r.template(h4, "--values", str(r.PROFILES["gpu-operator"])), "preflight")
    assert "--driver-root=/run/nvidia/driver" in args
    assert "--gpu-node-selector=nvidia.com/gpu.present=true" in args
    assert {"--crds-enabled", "--binding-conditions"} <= set(args)
    assert "--adopt" not in args
    args = _args(
        r.template(
            h4, *r.set_args({"crds.enabled": "false", "kubeletPlugin.bindingConditions": "false"})
        ),
        "preflight",
    )
    assert {"--no-crds-enabled", "--no-binding-conditions"} <= set(args)


def test_adopt_enabled_passes_adopt_and_grants_patch_on_those_names_only(h4: helm.Helm) -> None:
    objects = r.template(h4, "--set", "adopt.enabled=true")
    assert "--adopt" in _args(objects, "preflight")
    rules = r.find(objects, "ClusterRole", _name("preflight"))["rules"]
    patching = [rule for rule in rules if "patch" in rule["verbs"]]
    assert {res for rule in patching for res in rule["resources"]} == {
        "customresourcedefinitions",
        "deviceclasses",
    }
    assert all(rule["resourceNames"] for rule in patching)
    default = r.find(r.template(h4), "ClusterRole", _name("preflight"))["rules"]
    assert not [rule for rule in default if "patch" in rule["verbs"]]


def test_verify_follows_its_values(h4: helm.Helm) -> None:
    args = _args(
        r.template(
            h4, *r.set_args({"verify.failurePolicy": "Warn", "verify.timeoutSeconds": "42"})
        ),
        "verify",
    )
    assert {"--failure-policy=Warn", "--timeout-seconds=42"} <= set(args)


def test_uninstall_force(h4: helm.Helm) -> None:
    assert "--force" not in _args(r.template(h4), "uninstall")
    assert "--force" in _args(r.template(h4, "--set", "uninstall.force=true"), "uninstall")


def test_uninstall_may_delete_only_the_three_writers_the_other_hooks_and_the_turn(
    h4: helm.Helm,
) -> None:
    objects = r.template(h4)
    rules = r.find(objects, "Role", _name("uninstall"))["rules"]
    deleting = [rule for rule in rules if "delete" in rule["verbs"]]
    hooks = sorted(_name(h) for h in ("preflight", "migrate", "roll-agents", "verify"))
    assert [(rule["resources"], sorted(rule["resourceNames"])) for rule in deleting] == [
        (
            ["daemonsets", "deployments"],
            sorted(
                f"{r.RELEASE}-compute-domains-{c}"
                for c in ("controller", "kubelet-plugin", "imex-agent")
            ),
        ),
        (["jobs"], hooks),
        (["configmaps"], [placement.TURN_CONFIGMAP]),
    ]
    in_order = ",".join(_name(h) for h in ("preflight", "migrate", "roll-agents", "verify"))
    assert f"--hook-jobs={in_order}" in _args(objects, "uninstall")


def test_adopt_enabled_lets_migrate_retire_the_incumbents_objects(h4: helm.Helm) -> None:
    objects = r.template(
        h4, *r.set_args({"adopt.enabled": "true", "adopt.incumbentNamespace": "nv"})
    )
    assert _args(objects, "migrate")[4:] == ["--adopt", "--incumbent-namespace=nv"]
    role = next(
        o
        for o in _hook_objects(objects, "migrate")
        if o["kind"] == "Role" and o["metadata"]["namespace"] == "nv"
    )
    assert {res for rule in role["rules"] for res in rule["resources"]} == {
        "daemonsets",
        "resourceclaimtemplates",
    }
    binding = next(
        o
        for o in _hook_objects(objects, "migrate")
        if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "nv"
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": _name("migrate"), "namespace": r.NAMESPACE}
    ]
    assert not [
        o
        for o in _hook_objects(r.template(h4), "migrate")
        if o["metadata"].get("namespace") == "nv"
    ]


def test_migrate_gets_the_snapshot_prefix(h4: helm.Helm) -> None:
    assert _args(r.template(h4), "migrate")[3:] == [
        f"--snapshot-prefix={r.RELEASE}-compute-domains-snapshot"
    ]


@pytest.mark.parametrize("hook", sorted(HOOKS))
def test_a_disabled_hook_renders_nothing(h4: helm.Helm, hook: str) -> None:
    objects = r.template(h4, "--set", f"{SWITCH.get(hook, f'{hook}.enabled')}=false")
    assert _hook_objects(objects, hook) == []
    assert all(_hook_objects(objects, other) for other in HOOKS if other != hook)


def test_hook_annotations_value_reaches_every_hook_object(h4: helm.Helm) -> None:
    objects = r.template(h4, "--set", "hooks.annotations.example\\.com/owner=platform")
    hook_objects = [o for hook in HOOKS for o in _hook_objects(objects, hook)]
    # A Job, a ServiceAccount, a ClusterRole and binding each; a Role and binding but preflight.
    assert len(hook_objects) == len(HOOKS) * 4 + (len(HOOKS) - 1) * 2
    for o in hook_objects:
        assert o["metadata"]["annotations"]["example.com/owner"] == "platform"


@pytest.mark.parametrize(
    "values",
    [
        {"verify.failurePolicy": "Maybe"},
        {"uninstall.forced": "true"},
        {"hooks.activeDeadlineSeconds": "5"},
    ],
)
def test_schema_rejects_bad_hook_values(h4: helm.Helm, values: dict[str, str]) -> None:
    with pytest.raises(AssertionError):
        r.template(h4, *r.set_args(values))


def test_preflight_runs_before_a_rollback_and_knows_the_storage_and_whether_it_upgrades(
    h4: helm.Helm,
) -> None:
    args = _args(r.template(h4), "preflight")
    assert "--storage-version=v1beta2" in args
    assert "--upgrade" not in args and "--allow-one-way-upgrade" not in args
    upgrade = _args(r.template(h4, "--is-upgrade", "--set", "crds.storageVersion=v1beta1"),
                    "preflight")  # fmt: skip
    assert {"--upgrade", "--storage-version=v1beta1"} <= set(upgrade)
    allowed = _args(r.template(h4, "--set", "preflight.allowOneWayUpgrade=true"), "preflight")
    assert "--allow-one-way-upgrade" in allowed


def test_uninstall_checks_its_release_record_and_its_own_job(h4: helm.Helm) -> None:
    objects = r.template(h4)
    record = f"sh.helm.release.v1.{r.RELEASE}.v1"  # helm template renders revision 1
    args = _args(objects, "uninstall")
    assert {f"--release-record={record}", f"--job={_name('uninstall')}"} <= set(args)
    rules = r.find(objects, "Role", _name("uninstall"))["rules"]
    assert {"apiGroups": [""], "resources": ["secrets", "configmaps"],
            "resourceNames": [record], "verbs": ["get"]} in rules  # fmt: skip
    assert {"apiGroups": ["batch"], "resources": ["jobs"],
            "resourceNames": [_name("uninstall")], "verbs": ["get"]} in rules  # fmt: skip
    anyone = _args(r.template(h4, "--set", "uninstall.requireOwner=false"), "uninstall")
    assert "--no-require-owner" in anyone


def test_roll_agents_only_with_on_delete_agents_and_may_delete_only_pods(h4: helm.Helm) -> None:
    objects = r.template(h4)
    assert f"--agent-daemonset={r.RELEASE}-compute-domains-imex-agent" in _args(
        objects, "roll-agents"
    )
    rules = r.find(objects, "Role", _name("roll-agents"))["rules"]
    assert [rule["resources"] for rule in rules if "delete" in rule["verbs"]] == [["pods"]]
    rolling = r.template(h4, "--set", "imexAgent.updateStrategy.type=RollingUpdate")
    assert _hook_objects(rolling, "roll-agents") == []


def test_hooks_disabled_leave_only_migrate_as_an_ordinary_job_per_version(h4: helm.Helm) -> None:
    objects = r.template(h4, "--set", "hooks.enabled=false")
    assert not [o for o in objects if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    (job,) = r.of_kind(objects, "Job")
    version = str(r.CHART_METADATA["version"]).replace(".", "-")
    assert job["metadata"]["name"] == f"{r.RELEASE}-compute-domains-migrate-{version}"
    assert job["spec"]["backoffLimit"] == 6, "retried while the webhook comes up beside it"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == _name("migrate")
    assert r.find(objects, "ClusterRole", _name("migrate"))
    for hook in ("preflight", "roll-agents", "verify", "uninstall"):
        assert _hook_objects(objects, hook) == [], hook


def test_hook_pods_get_the_priority_class(h4: helm.Helm) -> None:
    spec = _job(r.template(h4), "verify")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    spec = _job(r.template(h4, "--values", str(r.PROFILES["gke"])), "verify")["spec"]["template"]
    assert "priorityClassName" not in spec["spec"]


def test_verify_must_end_before_its_deadline(h4: helm.Helm) -> None:
    error = r.rejected(h4, *r.set_args({"verify.timeoutSeconds": "600"}))
    assert "verify.timeoutSeconds=600 is not below hooks.activeDeadlineSeconds=600" in error
    r.template(
        h4, *r.set_args({"verify.timeoutSeconds": "600", "hooks.activeDeadlineSeconds": "900"})
    )
