"""Render the chart with helm 3 or 4 and look things up in the result, for the chart tests."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import yaml

from cdsim import tools
from tests.support import helm

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
PROFILES = {path.stem: path for path in sorted((REPO / "values").glob("*.yaml"))}
"""The value profiles in values/, by name (host-driver, gpu-operator, gb200-nvl72, gke, eks,
openshift), and sim, the simulation's overlay."""
CHART_METADATA: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION = str(CHART_METADATA["appVersion"])
"""The chart's appVersion: the image tag and ``app.kubernetes.io/version`` by default."""
PRODUCTION_PROFILE = "gb200-nvl72"
"""The profile the cluster tests install, under the simulation's overlay."""


def profile_value(path: str, profile: str = PRODUCTION_PROFILE) -> Any:
    """A value the profile sets (dotted path), e.g. ``kubeletPlugin.channelSlots``."""
    node: Any = yaml.safe_load(PROFILES[profile].read_text())
    for key in path.split("."):
        node = node[key]
    return node


def sim_values(profile: str = PRODUCTION_PROFILE) -> list[str]:
    """Helm arguments for ``profile`` with the simulation's overlay (values/sim.yaml) on top."""
    return ["--values", str(PROFILES[profile]), "--values", str(PROFILES["sim"])]


MAJORS = ("helm3", "helm4")
UNPRIVILEGED_CONTAINER = {
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""compute-domains.unprivilegedContainerSecurityContext at the image's UID (controller, webhook)."""
NAMESPACE = "compute-domains"
RELEASE = "cd"

STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
"""Labels every rendered object carries (the CRD subchart's included)."""

Obj = dict[str, Any]
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: a rendered chart parses ~7x faster."""

BASE_KINDS = {
    "ClusterRole": 9,
    "ClusterRoleBinding": 9,
    "CustomResourceDefinition": 2,
    "DaemonSet": 2,
    "Deployment": 2,
    "DeviceClass": 2,
    "Job": 5,
    "MutatingWebhookConfiguration": 1,
    "NetworkPolicy": 3,
    "PodDisruptionBudget": 2,
    "ResourceClaimTemplate": 1,
    "Role": 8,
    "RoleBinding": 8,
    "Service": 4,
    "ServiceAccount": 9,
    "ValidatingAdmissionPolicy": 7,
    "ValidatingAdmissionPolicyBinding": 7,
    "ValidatingWebhookConfiguration": 1,
}
"""What the default values render: plugin, controller, agent and webhook, with their RBAC,
admission and network policies, the webhook's configurations, the policy that keeps the daemon
DeviceClass to the agent, and the five hook Jobs with their ServiceAccounts and RBAC (a
ClusterRole each; migrate, roll-agents, verify and uninstall also a Role)."""
PROFILE_EXTRA_KINDS = {
    "gke": {"ResourceQuota": 1},
    "openshift": {"Role": 1, "RoleBinding": 1},
}
"""What a profile renders beyond the default: GKE's priority quota, OpenShift's SCC grant."""


def expected_kinds(profile: str | None) -> list[str]:
    """The sorted kinds of every object the chart renders with ``profile`` (None: defaults)."""
    counts = dict(BASE_KINDS)
    for kind, extra in PROFILE_EXTRA_KINDS.get(profile or "", {}).items():
        counts[kind] = counts.get(kind, 0) + extra
    return sorted(kind for kind, n in counts.items() for _ in range(n))


def helm_for(
    major: str,
    home: pathlib.Path,
    kubeconfig: pathlib.Path | None = None,
    renders: helm.Renders | None = None,
) -> helm.Helm:
    """A helm runner for ``major``; without a kubeconfig it can only lint and render.
    ``renders``: earlier ``helm template`` outputs to reuse (and to add to)."""
    return helm.Helm(
        binary=tools.ToolBox.from_env().path(major),
        kubeconfig=kubeconfig or home / "no-cluster.kubeconfig",
        home=home,
        renders=renders,
    )


def template(
    h: helm.Helm,
    *args: str,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    chart: pathlib.Path | Sequence[str] = CHART,
) -> list[Obj]:
    """``helm template`` of the chart; the rendered objects in order (empty documents dropped).

    ``chart``: a chart folder, or a reference with its arguments (``TestCluster.chart()``).
    """
    source = [str(chart)] if isinstance(chart, pathlib.Path) else list(chart)
    out = h.run("template", release, *source, "--namespace", namespace, *args)
    return [doc for doc in yaml.load_all(out, Loader=YAML_LOADER) if doc]


def set_args(values: dict[str, str]) -> list[str]:
    """``--set`` arguments for a flat mapping of dotted keys to values."""
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


def rendered(h: helm.Helm, **values: str) -> list[Obj]:
    """The chart rendered with ``values`` (dotted keys) set."""
    return template(h, *set_args(values))


def rejected(h: helm.Helm, *args: str) -> str:
    """The error of a render with ``args`` that must fail."""
    with pytest.raises(AssertionError) as failed:
        template(h, *args)
    return str(failed.value)


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The one object of ``kind`` (and ``name``, when given); fails when not exactly one."""
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    """Every object of ``kind``."""
    return [o for o in objects if o["kind"] == kind]


COMPONENT = "app.kubernetes.io/component"
WORKLOADS = {
    "kubelet-plugin": "DaemonSet",
    "imex-agent": "DaemonSet",
    "controller": "Deployment",
    "webhook": "Deployment",
}
"""The chart's pod-running objects, by component."""


def of_component(objects: list[Obj], component: str) -> list[Obj]:
    """Every object labelled with ``component``."""
    return [o for o in objects if o["metadata"].get("labels", {}).get(COMPONENT) == component]


def workload(objects: list[Obj], component: str = "kubelet-plugin") -> Obj:
    """The DaemonSet or Deployment of ``component``; fails when not exactly one."""
    kind = WORKLOADS[component]
    matches = [o for o in of_component(objects, component) if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind} of {component}, found {len(matches)}"
    return matches[0]


def pod_spec(objects: list[Obj], component: str = "kubelet-plugin") -> Obj:
    """The pod spec of a component's workload (the kubelet plugin DaemonSet by default)."""
    spec: Obj = workload(objects, component)["spec"]["template"]["spec"]
    return spec


def container(objects: list[Obj], name: str) -> Obj:
    """A container (or init container) of any of the chart's pods, by its (unique) name."""
    for component, kind in WORKLOADS.items():
        if not [o for o in of_component(objects, component) if o["kind"] == kind]:
            continue
        spec = pod_spec(objects, component)
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            if c["name"] == name:
                return dict(c)
    raise AssertionError(f"no container {name} in the chart's pods")


def all_containers(objects: list[Obj], component: str = "kubelet-plugin") -> Iterator[Obj]:
    """Every init container and container of a component's pod."""
    spec = pod_spec(objects, component)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def flag(c: Obj, name: str) -> str | None:
    """The value of ``--name=value`` in a container's args, or None when absent."""
    prefix = f"--{name}="
    values = [a.removeprefix(prefix) for a in c["args"] if a.startswith(prefix)]
    assert len(values) <= 1, f"--{name} given {len(values)} times to {c['name']}"
    return values[0] if values else None


def volume(objects: list[Obj], name: str, component: str = "kubelet-plugin") -> Obj:
    """A volume of a component's pod (the plugin's by default), by name."""
    for v in pod_spec(objects, component)["volumes"]:
        if v["name"] == name:
            return dict(v)
    raise AssertionError(f"no volume {name} in the {component} pod")


def env(c: Obj) -> dict[str, Obj]:
    """A container's env entries by name."""
    return {e["name"]: e for e in c.get("env", [])}


def mount(c: Obj, name: str) -> Obj | None:
    """A container's mount of volume ``name``, or None."""
    for m in c.get("volumeMounts", []):
        if m["name"] == name:
            return dict(m)
    return None
