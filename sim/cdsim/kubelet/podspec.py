"""From a pod spec to the command lines and environments that stand in for its containers.

Pure: the caller supplies the node's host tree, the pod's folder and what the "runtime" adds
(ServiceAccount variables, CDI injections). Semantics follow the kubelet where a process can
follow them: ``$(VAR)`` expansion, downward-API ``fieldRef``s, the image entrypoint
``computedomains``; container paths under ``hostPath`` (and ``emptyDir``) mounts become paths
in the node's host tree, since a process shares the host's filesystem.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from cdsim.kubelet import probes
from computedomains.kube import wire

IMAGE_ENTRYPOINT = "computedomains"
"""The image's ENTRYPOINT (:data:`cdsim.image.spec.ENTRYPOINT`); run as this Python's
``-m computedomains``."""
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
"""What the image's ENV sets for every container."""

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_LABEL_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


class PodSpecError(ValueError):
    """The pod asks for something the simulated kubelet cannot provide."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, unknown ones kept verbatim.

    ``$$`` escapes a ``$`` (``$$(X)`` stays ``$(X)``); an unclosed ``$(`` is kept as is.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end == -1:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def field_value(pod: wire.Pod, field_path: str) -> str:
    """A downward-API ``fieldRef`` value; empty while the pod does not have it yet."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
    }
    if field_path in simple:
        return simple[field_path]
    keyed = _LABEL_FIELD.fullmatch(field_path)
    if keyed:
        source = meta.get("labels", {}) if keyed[1] == "labels" else meta.get("annotations", {})
        return source.get(keyed[2], "")
    raise PodSpecError(f"fieldRef {field_path!r} is not supported by the simulated kubelet")


def container_env(
    container: wire.Container, pod: wire.Pod, service_env: Mapping[str, str]
) -> dict[str, str]:
    """The container's own variables, in order, each expanded against those before it."""
    env: dict[str, str] = {}
    for var in container.get("env", []):
        name = var.get("name", "")
        if not _VAR_NAME.fullmatch(name):
            raise PodSpecError(f"container {container.get('name')!r}: bad env name {name!r}")
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(var.get("value", ""), {**service_env, **env})
        elif "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"].get("fieldPath", ""))
        else:
            raise PodSpecError(
                f"container {container.get('name')!r}: env {name} uses {sorted(source)}; "
                "the simulated kubelet supports only value and fieldRef"
            )
    return env


@dataclasses.dataclass(frozen=True)
class Mount:
    """A container path and the host-tree path a process uses in its place."""

    container_path: str
    host_path: pathlib.Path
    kind: str = ""
    """``hostPath.type`` (``DirectoryOrCreate``, ``FileOrCreate``, ...) or ``emptyDir``."""


def container_mounts(
    container: wire.Container,
    volumes: Sequence[wire.Volume],
    *,
    node_root: pathlib.Path,
    pod_dir: pathlib.Path,
) -> list[Mount]:
    """The container's ``hostPath`` and ``emptyDir`` mounts, longest container path first.

    Other volume kinds (ConfigMaps, the projected ServiceAccount token) have no host-tree
    counterpart and are left alone; the token reaches the process through the environment.
    """
    by_name = {v.get("name", ""): v for v in volumes}
    mounts: list[Mount] = []
    for mount in container.get("volumeMounts", []):
        volume = by_name.get(mount.get("name", ""))
        if volume is None:
            continue
        sub = mount.get("subPath", "")
        if "hostPath" in volume:
            source = volume["hostPath"]
            host = node_root / source.get("path", "/").lstrip("/")
            kind = source.get("type", "")
        elif "emptyDir" in volume:
            host, kind = pod_dir / "volumes" / volume.get("name", ""), "emptyDir"
        else:
            continue
        mounts.append(Mount(mount.get("mountPath", "/"), host / sub if sub else host, kind))
    return sorted(mounts, key=lambda m: len(m.container_path), reverse=True)


def rewrite(value: str, mounts: Sequence[Mount]) -> str:
    """Map a container path at the start of ``value`` (or after ``--flag=``) to the host tree."""
    prefix, rest = "", value
    if value.startswith("-") and "=" in value:
        flag, _, rest = value.partition("=")
        prefix = flag + "="
    for mount in mounts:
        base = mount.container_path.rstrip("/")
        if base and (rest == base or rest.startswith(base + "/")):
            return prefix + str(mount.host_path) + rest[len(base) :]
    return value


def image_tag(image: str) -> str:
    """The tag of an image reference (``repo:tag``, ``repo:tag@digest``); empty when none."""
    name = image.partition("@")[0]
    last = name.rpartition("/")[2]
    return last.rpartition(":")[2] if ":" in last else ""


def entrypoint(command: Sequence[str], args: Sequence[str], *, python: str) -> list[str]:
    """The argv a container runs: ``command + args``, or the image entrypoint with ``args``.

    The image entrypoint ``computedomains`` (also when named in ``command[0]`` or as the first
    arg) runs as ``python -m computedomains``, so the processes use this checkout's code.
    """
    if command:
        argv = [*command, *args]
    elif args and pathlib.PurePosixPath(args[0]).name == IMAGE_ENTRYPOINT:
        argv = list(args)
    else:
        argv = [IMAGE_ENTRYPOINT, *args]
    if pathlib.PurePosixPath(argv[0]).name == IMAGE_ENTRYPOINT:
        return [python, "-m", "computedomains", *argv[1:]]
    return argv


@dataclasses.dataclass(frozen=True)
class Injection:
    """What the runtime adds to one container from its resolved CDI devices."""

    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[Mount, ...] = ()


@dataclasses.dataclass(frozen=True)
class PodContext:
    """Everything outside the pod spec that decides how its containers run."""

    node_root: pathlib.Path
    pod_dir: pathlib.Path
    python: str
    base_env: Mapping[str, str]
    """Every process gets these (PATH, the ServiceAccount folder, ...)."""
    service_env: Mapping[str, str]
    """Variables the kubelet injects and ``$(VAR)`` may refer to (KUBERNETES_SERVICE_*)."""
    injections: Mapping[str, Injection] = dataclasses.field(default_factory=dict)
    """Container name → what its CDI devices add."""
    pythons: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Image tag → the Python that runs the entrypoint of containers with that tag instead of
    ``python`` (a previous release's virtualenv; see :mod:`cdsim.kubelet.images`)."""


@dataclasses.dataclass(frozen=True)
class ContainerPlan:
    """One container as a process."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: pathlib.Path
    mounts: tuple[Mount, ...]
    sidecar: bool = False
    """An init container with ``restartPolicy: Always``: started, then kept running."""
    logs_on_error: bool = False
    """``terminationMessagePolicy: FallbackToLogsOnError``: a failed exit's message is the
    end of its log (no container here writes ``/dev/termination-log``)."""
    probes: tuple[probes.Probe, ...] = ()
    """Its startup, liveness and readiness probes, as far as it has them."""


def plan_container(container: wire.Container, pod: wire.Pod, ctx: PodContext) -> ContainerPlan:
    """The process for ``container`` of ``pod``."""
    name = container.get("name", "")
    injection = ctx.injections.get(name, Injection())
    mounts = [
        *injection.mounts,
        *container_mounts(
            container,
            pod.get("spec", {}).get("volumes", []),
            node_root=ctx.node_root,
            pod_dir=ctx.pod_dir,
        ),
    ]
    mounts.sort(key=lambda m: len(m.container_path), reverse=True)
    own = container_env(container, pod, ctx.service_env)
    mapping = {**ctx.service_env, **own}
    python = ctx.pythons.get(image_tag(container.get("image", "")))
    argv = entrypoint(
        [rewrite(expand(a, mapping), mounts) for a in container.get("command", [])],
        [rewrite(expand(a, mapping), mounts) for a in container.get("args", [])],
        python=python or ctx.python,
    )
    base = dict(ctx.base_env)
    if python is not None:
        base.pop("PYTHONPATH", None)  # it may name this checkout's code; the release has its own
    env = {
        **IMAGE_ENV,
        **base,
        **ctx.service_env,
        **{k: rewrite(v, mounts) for k, v in own.items()},
        **{k: rewrite(v, mounts) for k, v in injection.env},
    }
    working = rewrite(container.get("workingDir", ""), mounts)
    cwd = pathlib.Path(working) if working.startswith(str(ctx.node_root)) else ctx.pod_dir

    def in_container(command: Sequence[str]) -> probes.Exec:
        """An exec probe's command, mapped into the host tree like the container's own."""
        argv = entrypoint(
            [rewrite(expand(a, mapping), mounts) for a in command], [], python=python or ctx.python
        )
        return probes.Exec(tuple(argv), env, str(cwd))

    pod_ip = pod.get("status", {}).get("podIP", "")
    planned = []
    for kind in probes.ProbeKind:
        spec = cast(Mapping[str, Any], container).get(kind.field)
        if spec:
            exec_action = in_container(spec["exec"].get("command", [])) if "exec" in spec else None
            try:
                planned.append(
                    probes.parse(
                        kind, spec, container=container, pod_ip=pod_ip, exec_action=exec_action
                    )
                )
            except probes.ProbeSpecError as exc:
                raise PodSpecError(str(exc)) from exc
    return ContainerPlan(
        name=name,
        argv=tuple(argv),
        env=env,
        cwd=cwd,
        mounts=tuple(mounts),
        sidecar=container.get("restartPolicy") == "Always",
        logs_on_error=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        probes=tuple(planned),
    )


@dataclasses.dataclass(frozen=True)
class PodPlan:
    """Init containers (in order) and containers of one pod."""

    init: tuple[ContainerPlan, ...]
    containers: tuple[ContainerPlan, ...]
    restart_policy: str
    """``Always``, ``OnFailure`` or ``Never``."""
    termination_grace: float = 30.0
    """``terminationGracePeriodSeconds``: SIGTERM to SIGKILL when a probe kills a container."""


def plan_pod(pod: wire.Pod, ctx: PodContext) -> PodPlan:
    """Every container of ``pod`` as a process; :class:`PodSpecError` when one cannot run."""
    spec = pod.get("spec", {})
    return PodPlan(
        init=tuple(plan_container(c, pod, ctx) for c in spec.get("initContainers", [])),
        containers=tuple(plan_container(c, pod, ctx) for c in spec.get("containers", [])),
        restart_policy=spec.get("restartPolicy", "Always"),
        termination_grace=float(spec.get("terminationGracePeriodSeconds", 30)),
    )
