"""The Argo CD sync order the Argo flow test relies on (tests/support/argo.py)."""

from __future__ import annotations

from typing import Any

from tests.support import argo


def obj(kind: str, name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "annotations": annotations},
    }


def test_phases_then_waves_then_kinds_then_names() -> None:
    objects = [
        obj("Deployment", "controller"),
        obj("Job", "verify", **{argo.HOOK: "PostSync", argo.WAVE: "10"}),
        obj("Job", "migrate", **{argo.HOOK: "PostSync"}),
        obj("Deployment", "webhook", **{argo.WAVE: "-1"}),
        obj("CustomResourceDefinition", "computedomains", **{argo.WAVE: "-2"}),
        obj("ServiceAccount", "controller"),
        obj("Job", "preflight", **{argo.HOOK: "PreSync"}),
    ]
    order = [(p.phase, p.label) for p in argo.plan(objects)]
    assert order == [
        ("PreSync", "Job/preflight"),
        ("Sync", "CustomResourceDefinition/computedomains"),
        ("Sync", "Deployment/webhook"),
        ("Sync", "ServiceAccount/controller"),
        ("Sync", "Deployment/controller"),
        ("PostSync", "Job/migrate"),
        ("PostSync", "Job/verify"),
    ]


def test_helm_hooks_map_onto_phases_only_without_an_argo_annotation() -> None:
    helm_only = obj(
        "Job",
        "check",
        **{
            argo.HELM_HOOK: "pre-install,pre-upgrade",
            argo.HELM_WEIGHT: "-5",
            argo.HELM_DELETE_POLICY: "before-hook-creation,hook-succeeded",
        },
    )
    both = obj("Job", "both", **{argo.HELM_HOOK: "post-install", argo.HOOK: "PreSync"})
    first, second = argo.plan([helm_only, both])
    assert (first.phase, first.wave, first.label) == ("PreSync", -5, "Job/check")
    assert first.delete_policies == {"BeforeHookCreation", "HookSucceeded"}
    assert (second.phase, second.label) == ("PreSync", "Job/both")


def test_waves_group_one_phase() -> None:
    planned = argo.plan(
        [obj("ConfigMap", "a", **{argo.WAVE: "1"}), obj("ConfigMap", "b"), obj("Secret", "c")]
    )
    assert [[p.label for p in w] for w in argo.waves(planned, "Sync")] == [
        ["Secret/c", "ConfigMap/b"],
        ["ConfigMap/a"],
    ]
