"""An Argo CD sync, played against a test cluster: what Argo CD does with the rendered chart.

Argo CD has no Helm release: it renders with ``helm template --include-crds``, sorts what it
got into phases (PreSync, Sync, PostSync) by the ``argocd.argoproj.io/hook`` annotation (Helm
hook annotations map onto phases only on resources without an Argo CD one), and within a phase
into waves by ``argocd.argoproj.io/sync-wave``, then by kind (Helm's install order) and name.
Each wave is applied (here: server-side apply, Argo CD's ``ServerSideApply=true``) and must be
healthy before the next starts; hooks are created fresh (``BeforeHookCreation``), awaited, and
deleted once the whole sync succeeded (``HookSucceeded``). Everything applied, hooks included,
carries Argo CD's tracking annotation (``argocd.argoproj.io/tracking-id``, the default tracking
method since Argo CD 3.0). That is the documented behaviour this module reproduces (argo-cd
docs: user-guide/helm.md, sync-waves.md, resource_hooks.md, resource_tracking.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from computedomains import waiting

HOOK = "argocd.argoproj.io/hook"
WAVE = "argocd.argoproj.io/sync-wave"
DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"
SYNC_OPTIONS = "argocd.argoproj.io/sync-options"
HELM_HOOK = "helm.sh/hook"
HELM_WEIGHT = "helm.sh/hook-weight"
HELM_DELETE_POLICY = "helm.sh/hook-delete-policy"
FIELD_MANAGER = "argocd-controller"
TRACKING = "argocd.argoproj.io/tracking-id"
PHASES = ("PreSync", "Sync", "PostSync")
_HELM_PHASES = {
    "pre-install": "PreSync",
    "pre-upgrade": "PreSync",
    "post-install": "PostSync",
    "post-upgrade": "PostSync",
    "pre-delete": "PreDelete",
    "post-delete": "PostDelete",
}
_HELM_POLICIES = {
    "before-hook-creation": "BeforeHookCreation",
    "hook-succeeded": "HookSucceeded",
    "hook-failed": "HookFailed",
}
KIND_ORDER = (
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicaSet",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
    "Ingress",
    "APIService",
)
"""Helm's install order, which Argo CD uses within a wave; other kinds go last."""

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Planned:
    """One rendered object and where Argo CD puts it."""

    obj: Obj
    phase: str
    wave: int
    hook: bool
    delete_policies: frozenset[str]

    @property
    def label(self) -> str:
        """``Kind/name`` for messages."""
        return f"{self.obj['kind']}/{self.obj['metadata']['name']}"


def plan(objects: Sequence[Obj]) -> list[Planned]:
    """The objects in Argo CD's order: phase, then wave, then kind, then name."""
    planned = []
    for obj in objects:
        annotations = obj.get("metadata", {}).get("annotations") or {}
        if HOOK in annotations:
            phase = annotations[HOOK].split(",")[0].strip()
            policies = annotations.get(DELETE_POLICY, "")
            wave = int(annotations.get(WAVE, "0"))
        elif HELM_HOOK in annotations:
            first = annotations[HELM_HOOK].split(",")[0].strip()
            phase = _HELM_PHASES.get(first, "Skip")
            policies = ",".join(
                _HELM_POLICIES.get(p.strip(), p.strip())
                for p in annotations.get(HELM_DELETE_POLICY, "").split(",")
                if p.strip()
            )
            wave = int(annotations.get(HELM_WEIGHT, "0"))
        else:
            phase, policies, wave = "Sync", "", int(annotations.get(WAVE, "0"))
        delete = frozenset(p.strip() for p in policies.split(",") if p.strip())
        planned.append(Planned(obj, phase, wave, phase != "Sync", delete))
    order = {kind: i for i, kind in enumerate(KIND_ORDER)}
    planned.sort(
        key=lambda p: (
            PHASES.index(p.phase) if p.phase in PHASES else len(PHASES),
            p.wave,
            order.get(p.obj["kind"], len(order)),
            p.obj["metadata"]["name"],
        )
    )
    return planned


def waves(planned: Sequence[Planned], phase: str) -> list[list[Planned]]:
    """The objects of ``phase`` grouped into waves, in order."""
    groups: dict[int, list[Planned]] = {}
    for p in planned:
        if p.phase == phase:
            groups.setdefault(p.wave, []).append(p)
    return [groups[w] for w in sorted(groups)]


@dataclasses.dataclass
class SyncResult:
    """What one sync did."""

    applied: list[str] = dataclasses.field(default_factory=list)
    hooks: list[str] = dataclasses.field(default_factory=list)
    changed: list[str] = dataclasses.field(default_factory=list)
    """Non-hook objects whose fields outside ``status`` moved while they were applied, with the
    paths (a repeated sync of an unchanged chart must move none: a field that changes on every
    sync is one Argo CD fights over)."""


class ArgoSync:
    """Syncs rendered objects into ``namespace`` the way Argo CD's application controller does."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        app: str = "compute-domains",
        hook_log: Callable[[Obj], str] | None = None,
        timeout: float = 300,
    ) -> None:
        self._dyn = dynamic.DynamicClient(api)  # type: ignore[no-untyped-call]
        self._namespace = namespace
        self._app = app
        self._hook_log = hook_log
        self._timeout = timeout
        self.hook_output: dict[str, str] = {}
        """Hook Job name → its pod's log, as read before Argo CD deletes the hook."""

    def sync(self, objects: Sequence[Obj]) -> SyncResult:
        """One sync: PreSync hooks, the Sync waves, PostSync hooks; raises on a failed hook."""
        result = SyncResult()
        planned = plan(objects)
        for phase in PHASES:
            for wave in waves(planned, phase):
                for p in wave:
                    self._apply(p, result)
                for p in wave:
                    self._wait_healthy(p)
        # Argo CD deletes succeeded hooks once the whole operation succeeded, not per wave: a
        # hook Job's ServiceAccount (an earlier wave) must outlive the Job.
        for p in planned:
            if p.hook and p.phase in PHASES and "HookSucceeded" in p.delete_policies:
                self._delete(p.obj)
        return result

    def delete_application(self, objects: Sequence[Obj]) -> list[str]:
        """Delete the Application: PreDelete hooks first (a failing one stops the deletion),
        then every synced object in reverse order except those marked ``Delete=false``."""
        planned = plan(objects)
        result = SyncResult()
        pre_delete = [p for p in planned if p.phase == "PreDelete"]
        for wave in sorted({p.wave for p in pre_delete}):
            now = [p for p in pre_delete if p.wave == wave]
            for p in now:
                self._apply(p, result)
            for p in now:
                self._wait_healthy(p)
        deleted = []
        for p in reversed([p for p in planned if p.phase == "Sync"]):
            options = (p.obj["metadata"].get("annotations") or {}).get(SYNC_OPTIONS, "")
            if "Delete=false" in options:
                continue
            self._delete(p.obj)
            deleted.append(p.label)
        for p in pre_delete:
            self._delete(p.obj)
        return deleted

    def _resource(self, obj: Obj) -> Any:
        return self._dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])

    def _namespace_of(self, obj: Obj, resource: Any) -> str | None:
        if not resource.namespaced:
            return None
        return str(obj["metadata"].get("namespace") or self._namespace)

    def _apply(self, p: Planned, result: SyncResult) -> None:
        obj = p.obj
        resource = self._resource(obj)
        namespace = self._namespace_of(obj, resource)
        name = obj["metadata"]["name"]
        before = self._live(resource, name, namespace)
        if p.hook and before is not None and "BeforeHookCreation" in p.delete_policies:
            self._delete(obj)
            before = None
        group = obj["apiVersion"].rpartition("/")[0]
        tracking = f"{self._app}:{group}/{obj['kind']}:{namespace or ''}/{name}"
        annotations = {**(obj["metadata"].get("annotations") or {}), TRACKING: tracking}
        body = {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}
        if namespace is not None:
            body["metadata"]["namespace"] = namespace
        resource.server_side_apply(
            body=body,
            name=name,
            namespace=namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        (result.hooks if p.hook else result.applied).append(p.label)
        after = self._live(resource, name, namespace)
        moved = (
            not p.hook
            and before is not None
            and after is not None
            and after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
        )
        if moved:
            assert before is not None and after is not None
            # Argo CD's diff leaves status out (controllers write it, e.g. the type checker of
            # admission policies); what else moved is a field the sync and someone fight over.
            fought = [c for c in _changed(before, after) if not c.startswith("status")]
            if fought:
                result.changed.append(f"{p.label} ({', '.join(fought)})")

    @staticmethod
    def _live(resource: Any, name: str, namespace: str | None) -> Obj | None:
        try:
            live: Obj = resource.get(name=name, namespace=namespace).to_dict()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return live

    def _resource_version(self, resource: Any, name: str, namespace: str | None) -> str | None:
        live = self._live(resource, name, namespace)
        return None if live is None else str(live["metadata"]["resourceVersion"])

    def _delete(self, obj: Obj) -> None:
        resource = self._resource(obj)
        namespace = self._namespace_of(obj, resource)
        name = obj["metadata"]["name"]
        try:
            resource.delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Foreground"}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return

        def gone() -> bool:
            return self._resource_version(resource, name, namespace) is None

        waiting.until(f"{obj['kind']} {name} to be deleted", gone, timeout=self._timeout)

    def _wait_healthy(self, p: Planned) -> None:
        check = _HEALTH.get(p.obj["kind"])
        if check is None:
            return
        resource = self._resource(p.obj)
        namespace = self._namespace_of(p.obj, resource)
        name = p.obj["metadata"]["name"]

        def healthy() -> bool:
            live = resource.get(name=name, namespace=namespace).to_dict()
            verdict = check(live)
            if verdict is False and p.obj["kind"] == "Job":
                raise HookFailed(p.label, self._log(live))
            return bool(verdict)

        waiting.until(f"{p.label} to be healthy", healthy, timeout=self._timeout, interval=0.5)
        if p.obj["kind"] == "Job" and self._hook_log is not None:
            self.hook_output[name] = self._log(
                resource.get(name=name, namespace=namespace).to_dict()
            )

    def _log(self, job: Obj) -> str:
        return self._hook_log(job) if self._hook_log is not None else ""


class HookFailed(AssertionError):
    """A hook Job failed: the sync stops, as Argo CD's does (the SyncFail phase)."""

    def __init__(self, label: str, log: str) -> None:
        super().__init__(f"hook {label} failed:\n{log}")
        self.log = log


def _changed(before: Obj, after: Obj, prefix: str = "") -> list[str]:
    """The paths whose values differ (resourceVersion and managedFields' times aside)."""
    paths = []
    for key in sorted(set(before) | set(after)):
        path = f"{prefix}{key}"
        if path in ("metadata.resourceVersion", "metadata.managedFields"):
            if path == "metadata.managedFields" and _managers(before) != _managers(after):
                paths.append(f"{path} managers {_managers(before)} -> {_managers(after)}")
            continue
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            paths += _changed(old, new, f"{path}.")
        elif old != new:
            paths.append(path)
    return paths


def _managers(obj: Obj) -> list[str]:
    fields = obj.get("metadata", {}).get("managedFields") or []
    return sorted(f"{f.get('manager')}/{f.get('operation')}" for f in fields)


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _job_health(job: Obj) -> bool | None:
    """True once complete, False once failed, None while running (Argo CD's Job health)."""
    if _condition(job, "Complete") == "True":
        return True
    if _condition(job, "Failed") == "True":
        return False
    return None


def _deployment_health(deployment: Obj) -> bool:
    spec, status = deployment.get("spec", {}), deployment.get("status", {})
    wanted = spec.get("replicas", 1)
    return bool(
        status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
        and status.get("updatedReplicas", 0) == wanted
        and status.get("availableReplicas", 0) == wanted
    )


def _daemonset_health(daemonset: Obj) -> bool:
    status = daemonset.get("status", {})
    return bool(
        status.get("observedGeneration", 0) >= daemonset["metadata"].get("generation", 0)
        and status.get("updatedNumberScheduled", 0) == status.get("desiredNumberScheduled", 0)
        and status.get("numberAvailable", 0) == status.get("desiredNumberScheduled", 0)
    )


_HEALTH: dict[str, Callable[[Obj], bool | None]] = {
    "CustomResourceDefinition": lambda crd: _condition(crd, "Established") == "True",
    "Deployment": _deployment_health,
    "DaemonSet": _daemonset_health,
    "Job": _job_health,
}
"""Argo CD's built-in health checks for the kinds the chart renders that have one."""
