"""Render the chart with helm 3 or 4 and look things up in the result, for the chart tests."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import yaml

from computedomains.sim import tools
from tests.support import helm

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
PROFILES = {path.stem: path for path in sorted((REPO / "values").glob("*.yaml"))}
"""The value profiles in values/, by name (host-driver, gpu-operator, sim)."""
MAJORS = ("helm3", "helm4")
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


def helm_for(major: str, home: pathlib.Path, kubeconfig: pathlib.Path | None = None) -> helm.Helm:
    """A helm runner for ``major``; without a kubeconfig it can only lint and render."""
    return helm.Helm(
        binary=tools.ToolBox.from_env().path(major),
        kubeconfig=kubeconfig or home / "no-cluster.kubeconfig",
        home=home,
    )


def template(
    h: helm.Helm,
    *args: str,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    chart: pathlib.Path = CHART,
) -> list[Obj]:
    """``helm template`` of the chart; the rendered objects in order (empty documents dropped)."""
    out = h.run("template", release, str(chart), "--namespace", namespace, *args)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def set_args(values: dict[str, str]) -> list[str]:
    """``--set`` arguments for a flat mapping of dotted keys to values."""
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


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


def pod_spec(objects: list[Obj]) -> Obj:
    """The pod spec of the kubelet plugin DaemonSet."""
    spec: Obj = find(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(objects: list[Obj], name: str) -> Obj:
    """A container (or init container) of the plugin pod, by name."""
    spec = pod_spec(objects)
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name} in the plugin pod")


def all_containers(objects: list[Obj]) -> Iterator[Obj]:
    """Every init container and container of the plugin pod."""
    spec = pod_spec(objects)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def flag(c: Obj, name: str) -> str | None:
    """The value of ``--name=value`` in a container's args, or None when absent."""
    prefix = f"--{name}="
    values = [a.removeprefix(prefix) for a in c["args"] if a.startswith(prefix)]
    assert len(values) <= 1, f"--{name} given {len(values)} times to {c['name']}"
    return values[0] if values else None


def volume(objects: list[Obj], name: str) -> Obj:
    """A volume of the plugin pod, by name."""
    for v in pod_spec(objects)["volumes"]:
        if v["name"] == name:
            return dict(v)
    raise AssertionError(f"no volume {name} in the plugin pod")


def mount(c: Obj, name: str) -> Obj | None:
    """A container's mount of volume ``name``, or None."""
    for m in c.get("volumeMounts", []):
        if m["name"] == name:
            return dict(m)
    return None
