"""``computedomains hooks preflight``: whether this release may go onto this cluster now.

Helm runs it before install, upgrade and rollback (the hooks of the revision rolled back to),
Argo CD before every sync (PreSync), so it changes nothing unless asked to adopt, and it must
work before any of our objects exist. It gathers the facts and leaves every decision to
:mod:`computedomains.hooks.compat`, :mod:`computedomains.hooks.ownership` and
:mod:`computedomains.hooks.crdversions`:
``/version``, discovery, a server-side dry-run ResourceSlice, the objects this chart would take
over, our CRDs' versions and the GPU nodes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

from computedomains import flaggroups, flags
from computedomains.api import constants, resources

from . import client, compat, crdversions, helmwait, kubeio, nodeprereqs, ownership
from .report import Finding, Report, Severity, Stop

HOOK = "preflight"
PROBE_DRIVER = "preflight.computedomains.io"
"""Driver name of the dry-run ResourceSlice: nobody's, so no admission policy of ours applies."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings(client.ReleaseConnection):
    """The release, and the values preflight checks against the cluster (rendered by the chart)."""

    adopt: bool = flags.field(flaggroups.ADOPT)
    crds_enabled: bool = flags.switch(
        "--crds-enabled",
        default=True,
        negatable=True,
        help="this release installs the CRDs (value crds.enabled)",
    )
    driver_root: pathlib.Path = flags.field(flaggroups.NODE_PATHS["--driver-root"])
    gpu_node_selector: str = flags.field(flaggroups.GPU_NODE_SELECTOR)
    storage_version: str = flags.option(
        "--storage-version",
        default=constants.STORAGE_VERSION,
        help="the version this release's CRDs store (value crds.storageVersion)",
    )
    served_versions: tuple[str, ...] = flags.option(
        "--served-versions",
        default=",".join(crdversions.SERVED),
        type=flags.names,
        help="the versions this release's CRDs serve (its own code's, unless a chart says)",
    )
    upgrade: bool = flags.switch(
        "--upgrade", help="Helm renders this release as an upgrade of an installed one"
    )
    allow_one_way_upgrade: bool = flags.switch(
        "--allow-one-way-upgrade",
        help="warn, not refuse, when the upgrade stores a version the CRDs do not serve yet",
    )
    helm_version: str = flags.option(
        "--helm-version", default="", help="the Helm that renders (.Capabilities)"
    )
    helm4_wait: str = flags.option(
        "--helm4-wait",
        default="watcher",
        choices=helmwait.WAITS,
        help="the --wait strategy Helm 4 runs with (value preflight.helm4Wait)",
    )
    agent_daemonset: str = flags.field(flaggroups.AGENT_DAEMONSET)
    agent_pod_template: str = flags.option(
        "--agent-pod-template",
        default="",
        help="digest of the IMEX agent pod template this release renders",
    )
    agent_update_strategy: str = flags.option(
        "--agent-update-strategy", default="OnDelete", help="value imexAgent.updateStrategy.type"
    )
    binding_conditions: bool = flags.field(flaggroups.BINDING_CONDITIONS)


STOP = Stop(
    (kubeio.ApiError,),
    "the API server refused a check",
    "check the preflight hook's RBAC (templates/hook-preflight.yaml) and the API server's "
    "health, then retry",
    exit_code=2,
)


def run(api: kubeio.Api, args: Settings, report: Report) -> int:
    """Check, print every finding, adopt when asked; 1 when anything refuses the install."""
    release = ownership.Release(args.release, args.namespace)
    report.step(f"checking the cluster for release {release.name} in namespace {release.namespace}")
    if report.findings(_checks(api, args, release, report)):
        report.step("refused: fix the failures above and retry")
        return 1
    report.step("passed")
    return 0


def _checks(
    api: kubeio.Api, args: Settings, release: ownership.Release, report: Report
) -> list[Finding]:
    findings = [compat.check_version(api.get("/version"))]
    group = api.get_or_none(f"/apis/{compat.RESOURCE_GROUP}") or {}
    served = [str(v["version"]) for v in group.get("versions") or []]
    findings.append(compat.check_resource_api(served))
    if findings[-1].severity is Severity.FAIL or findings[0].severity is Severity.FAIL:
        return findings  # what follows needs resource.k8s.io/v1
    features, error = _probe_features(api)
    findings += compat.check_features(
        features, binding_conditions_value=args.binding_conditions, probe_error=error
    )
    findings += _owned(api, args, release, report)
    if args.crds_enabled:
        findings += _crd_versions(api, args, release)
    listed = [(kind, o) for kind, r in _WORKLOADS for o in api.list_items(r.path())]
    findings += ownership.check_workloads([_workload(o, k) for k, o in listed], release,
                                       adopt=args.adopt)  # fmt: skip
    agents = next(
        (
            helmwait.replaced_agents(o, pod_template=args.agent_pod_template)
            for kind, o in listed
            if kind == "DaemonSet"
            and (kubeio.name(o), kubeio.namespace(o)) == (args.agent_daemonset, release.namespace)
        ),
        0,
    )
    findings += helmwait.check(
        helm_version=args.helm_version, upgrade=args.upgrade,
        strategy=args.agent_update_strategy, wait=args.helm4_wait, agents=agents,
    )  # fmt: skip
    found = list(api.list_items(resources.NODES.path(), label_selector=args.gpu_node_selector))
    nodes = [
        compat.GpuNode(
            name=kubeio.name(o),
            labels=kubeio.labels(o),
            has_fabric_condition=kubeio.condition(o, constants.FABRIC_CONDITION) is not None,
        )
        for o in found
    ]
    findings.append(compat.check_gpu_nodes(nodes, selector=args.gpu_node_selector))
    findings += compat.check_driver_root(str(args.driver_root), nodes)
    findings += compat.check_clique_labels(nodes)
    namespace = api.get(resources.NAMESPACES.path(release.namespace))
    findings.append(nodeprereqs.check_pod_security(release.namespace, kubeio.labels(namespace)))
    facts = [nodeprereqs.NodeFacts.of(o) for o in found]
    findings += nodeprereqs.check_runtimes(facts)
    findings += nodeprereqs.check_drivers(facts)
    return findings


_WORKLOADS = (("DaemonSet", resources.DAEMON_SETS), ("Deployment", resources.DEPLOYMENTS))


def _crd_versions(api: kubeio.Api, args: Settings, release: ownership.Release) -> list[Finding]:
    """What the API server would refuse of our CRDs half-way (:mod:`crdversions`)."""
    live = []
    for name in ownership.CRD_NAMES:
        crd = api.get_or_none(resources.CRDS.path(name))
        if crd is None:
            continue
        live.append(
            crdversions.LiveCRD(
                name=name,
                served=tuple(
                    str(v["name"]) for v in (crd.get("spec") or {}).get("versions") or []
                    if v.get("served")
                ),
                stored=tuple((crd.get("status") or {}).get("storedVersions") or ()),
            )
        )  # fmt: skip
    where = {"release": release.name, "namespace": release.namespace}
    return [
        *crdversions.check_stored(live, served=args.served_versions, **where),
        *crdversions.check_one_way(
            live, storage=args.storage_version, upgrade=args.upgrade,
            allowed=args.allow_one_way_upgrade, **where,
        ),
    ]  # fmt: skip


def _workload(obj: kubeio.Obj, kind: str) -> ownership.Workload:
    pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    words = [(c.get("command") or c.get("args") or [""])[0] for c in containers]
    return ownership.Workload(
        kind=kind,
        namespace=str(obj["metadata"].get("namespace", "")),
        name=kubeio.name(obj),
        labels=kubeio.labels(obj),
        commands=tuple(str(w).rsplit("/", 1)[-1] for w in words),
    )


def _probe_features(api: kubeio.Api) -> tuple[compat.DraFeatures | None, str]:
    # A field whose feature gate is off is dropped by the API server on write, so a dry-run
    # create shows which gates are on without persisting anything.
    device: dict[str, Any] = {
        "name": "probe",
        "taints": [{"key": f"{constants.OWN_PREFIX}/preflight", "effect": "NoSchedule"}],
        "bindingConditions": ["Probe"],
        "bindingFailureConditions": ["ProbeFailed"],
        "allowMultipleAllocations": True,
    }
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "compute-domains-preflight-probe"},
        "spec": {
            "driver": PROBE_DRIVER,
            "pool": {"name": "probe", "generation": 0, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": [device],
        },
    }
    try:
        kept = api.create(resources.RESOURCE_SLICES.path(), body, dry_run=True)
    except kubeio.ApiError as exc:
        return None, str(exc)
    echoed = ((kept.get("spec") or {}).get("devices") or [{}])[0]
    return (
        compat.DraFeatures(
            device_taints=bool(echoed.get("taints")),
            binding_conditions=bool(echoed.get("bindingConditions")),
            consumable_capacity=bool(echoed.get("allowMultipleAllocations")),
        ),
        "",
    )


def _owned(
    api: kubeio.Api, args: Settings, release: ownership.Release, report: Report
) -> list[Finding]:
    found: list[tuple[ownership.Existing, str]] = []
    names: list[tuple[str, resources.Resource, Sequence[str]]] = [
        ("DeviceClass", resources.DEVICE_CLASSES, ownership.DEVICE_CLASS_NAMES),
    ]
    if args.crds_enabled:
        names = [("CustomResourceDefinition", resources.CRDS, ownership.CRD_NAMES), *names]
    for kind, resource, wanted in names:
        for obj_name in wanted:
            path = resource.path(obj_name)
            obj = api.get_or_none(path)
            if obj is None:
                report.step(f"{kind} {obj_name}: not there yet")
                continue
            owners = tuple(str(r.get("kind")) for r in obj["metadata"].get("ownerReferences") or [])
            existing = ownership.Existing(
                kind, obj_name, kubeio.labels(obj), kubeio.annotations_of(obj), owners
            )
            found.append((existing, path))
    findings, to_adopt = ownership.check_owned([e for e, _ in found], release, adopt=args.adopt)
    paths = {e.name: p for e, p in found}
    for existing in to_adopt:
        patch = ownership.adoption_patch(release)
        api.merge_patch(paths[existing.name], patch)
        report.step(
            f"adopted {existing.kind} {existing.name}: set {ownership.MANAGED_BY_LABEL}=Helm, "
            f"{ownership.RELEASE_NAME_ANNOTATION}={release.name}, "
            f"{ownership.RELEASE_NAMESPACE_ANNOTATION}={release.namespace}"
        )
    if not args.crds_enabled:
        findings += _crds_elsewhere(api)
    return findings


def _crds_elsewhere(api: kubeio.Api) -> list[Finding]:
    missing = [n for n in ownership.CRD_NAMES if api.get_or_none(resources.CRDS.path(n)) is None]
    if not missing:
        return [Finding(Severity.OK, "crds.enabled=false: the CRDs exist (managed elsewhere)")]
    return [
        Finding(
            Severity.WARN,
            (
                f"crds.enabled=false but {', '.join(missing)} do not exist: nothing will serve "
                "ComputeDomains"
            ),
            fix="install the CRDs first, or set crds.enabled=true",
        )
    ]
