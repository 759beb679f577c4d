"""From a pod spec to the command lines and environments that stand in for its containers.

Pure: the caller supplies the node's host tree, the pod's folder and what the "runtime" adds
(ServiceAccount variables, CDI injections). Semantics follow the kubelet where a process can
follow them: ``$(VAR)`` expansion, downward-API ``fieldRef``s, the image entrypoint
``computedomains``; container paths under ``hostPath`` (and ``emptyDir``) mounts become paths
in the node's host tree, since a process shares the host's filesystem.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from cdsim.kubelet import imagestore, probes, runtimespec
from computedomains.kube import wire

IMAGE_ENTRYPOINT = "computedomains"
"""The image's ENTRYPOINT (:data:`cdsim.image.spec.ENTRYPOINT`); run as this Python's
``-m computedomains``."""
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
"""What the image's ENV sets for every container."""

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_LABEL_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


CHART_LABEL = ("app.kubernetes.io/name", "compute-domains")
"""The chart's pods: the simulated kubelet runs them (as processes, or from their image)."""
STAGES_PLACEHOLDER = "KUBELET_RUNS"
"""The word of the kwok stages that each cluster replaces by :func:`runs_here_jq`."""


def runs_here(pod: wire.Pod, registry: str = "") -> bool:
    """Whether the simulated kubelet runs ``pod``; kwok fakes the others.

    The chart's pods always; with ``registry`` (containers under runc), also every pod whose
    images all come from that registry. :func:`runs_here_jq` says the same to kwok.
    """
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    if meta.get("labels", {}).get(CHART_LABEL[0]) == CHART_LABEL[1]:
        return True
    images = [
        c.get("image", "") for c in [*spec.get("initContainers", []), *spec.get("containers", [])]
    ]
    return bool(registry) and bool(images) and all(i.startswith(f"{registry}/") for i in images)


def runs_here_jq(registry: str = "") -> str:
    """:func:`runs_here` as a jq expression over a pod, for kwok's stage selectors."""
    chart = f'.metadata.labels["{CHART_LABEL[0]}"] == "{CHART_LABEL[1]}"'
    if not registry:
        return chart
    images = "[(.spec.initContainers // [])[], .spec.containers[] | .image"
    return f'{chart} or ({images} | startswith("{registry}/")] | all)'


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
    """A container path and the host-tree path behind it (bound there, or used in its place)."""

    container_path: str
    host_path: pathlib.Path
    kind: str = ""
    """``hostPath.type`` (``DirectoryOrCreate``, ``FileOrCreate``, ...), ``emptyDir``, or
    ``files`` (a ConfigMap, Secret, downward-API or projected volume the kubelet writes)."""
    readonly: bool = False


FILE_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
"""Volume kinds whose files the kubelet writes into the pod's folder (``volumes/<name>``)."""


def on_node(node_root: pathlib.Path, path: str) -> pathlib.Path:
    """A path a component names on its node's host, in the node's host tree.

    A plugin's socket, a CDI mount's source: a container names them as on the host, a process
    of this checkout already names the tree itself.
    """
    if pathlib.Path(path).is_relative_to(node_root):
        return pathlib.Path(path)
    return node_root / path.lstrip("/")


def volume_dir(pod_dir: pathlib.Path, name: str) -> pathlib.Path:
    """Where the files of the pod's volume ``name`` (emptyDir, ConfigMap, ...) live."""
    return pod_dir / "volumes" / name


def container_mounts(
    container: wire.Container,
    volumes: Sequence[wire.Volume],
    *,
    node_root: pathlib.Path,
    pod_dir: pathlib.Path,
    files: bool = False,
) -> list[Mount]:
    """The container's volume mounts, longest container path first.

    ``hostPath`` and ``emptyDir`` always; with ``files`` also ConfigMap, Secret, downward-API
    and projected volumes (a container mounts the files the kubelet wrote, read-only). A
    process cannot: it gets the ServiceAccount token through the environment instead.
    """
    by_name = {v.get("name", ""): v for v in volumes}
    mounts: list[Mount] = []
    for mount in container.get("volumeMounts", []):
        volume = by_name.get(mount.get("name", ""))
        if volume is None:
            continue
        sub = mount.get("subPath", "")
        readonly = bool(mount.get("readOnly"))
        if "hostPath" in volume:
            source = volume["hostPath"]
            host = node_root / source.get("path", "/").lstrip("/")
            kind = source.get("type", "")
        elif "emptyDir" in volume:
            host, kind = volume_dir(pod_dir, volume.get("name", "")), "emptyDir"
        elif files and any(k in volume for k in FILE_VOLUMES):
            host, kind, readonly = volume_dir(pod_dir, volume.get("name", "")), "files", True
        elif files:
            raise PodSpecError(
                f"volume {volume.get('name')!r}: kind {sorted(set(volume) - {'name'})} is not "
                "supported by the simulated kubelet"
            )
        else:
            continue
        path = host / sub if sub else host
        mounts.append(Mount(mount.get("mountPath", "/"), path, kind, readonly))
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
    devices: tuple[runtimespec.DeviceNode, ...] = ()
    """Device nodes: created in a container; a process has none."""


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
    images: Mapping[str, imagestore.Image] = dataclasses.field(default_factory=dict)
    """Container name → its pulled image: such a container runs from it under runc."""
    runc_state: pathlib.Path | None = None
    """runc's state folder (needed once ``images`` has any)."""


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
    run: runtimespec.ContainerRun | None = None
    """Set when the container runs from its image under runc (``argv``/``env`` unused then)."""
    container_id: str = ""
    """runc's name for it (with :attr:`run`)."""
    image_id: str = ""
    """The pulled image's ``registry/repository@digest`` (with :attr:`run`)."""


def _probes(
    container: wire.Container, pod: wire.Pod, exec_action: Callable[[Sequence[str]], probes.Exec]
) -> tuple[probes.Probe, ...]:
    pod_ip = pod.get("status", {}).get("podIP", "")
    planned = []
    for kind in probes.ProbeKind:
        spec = cast(Mapping[str, Any], container).get(kind.field)
        if spec:
            action = exec_action(spec["exec"].get("command", [])) if "exec" in spec else None
            try:
                planned.append(
                    probes.parse(kind, spec, container=container, pod_ip=pod_ip, exec_action=action)
                )
            except probes.ProbeSpecError as exc:
                raise PodSpecError(str(exc)) from exc
    return tuple(planned)


def plan_container(container: wire.Container, pod: wire.Pod, ctx: PodContext) -> ContainerPlan:
    """How ``container`` of ``pod`` runs.

    From its image under runc when :attr:`PodContext.images` has it, else as a process of
    this checkout.
    """
    name = container.get("name", "")
    image = ctx.images.get(name)
    if image is not None:
        return _in_container(container, pod, ctx, image)
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
    argv = entrypoint(
        [rewrite(expand(a, mapping), mounts) for a in container.get("command", [])],
        [rewrite(expand(a, mapping), mounts) for a in container.get("args", [])],
        python=ctx.python,
    )
    env = {
        **IMAGE_ENV,
        **ctx.base_env,
        **ctx.service_env,
        **{k: rewrite(v, mounts) for k, v in own.items()},
        **{k: rewrite(v, mounts) for k, v in injection.env},
    }
    working = rewrite(container.get("workingDir", ""), mounts)
    cwd = pathlib.Path(working) if working.startswith(str(ctx.node_root)) else ctx.pod_dir

    def in_host_tree(command: Sequence[str]) -> probes.Exec:
        """An exec probe's command, mapped into the host tree like the container's own."""
        argv = entrypoint(
            [rewrite(expand(a, mapping), mounts) for a in command], [], python=ctx.python
        )
        return probes.Exec(tuple(argv), env, str(cwd))

    return ContainerPlan(
        name=name,
        argv=tuple(argv),
        env=env,
        cwd=cwd,
        mounts=tuple(mounts),
        sidecar=container.get("restartPolicy") == "Always",
        logs_on_error=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        probes=_probes(container, pod, in_host_tree),
    )


def _in_container(
    container: wire.Container, pod: wire.Pod, ctx: PodContext, image: imagestore.Image
) -> ContainerPlan:
    """``container`` as runc runs it from ``image``.

    The pod's volumes and CDI edits are bound in; the environment is the image's, the
    kubelet's and the container's own, in that order.
    """
    if ctx.runc_state is None:
        raise PodSpecError("a container from an image needs runc's state folder")
    name = container.get("name", "")
    spec = pod.get("spec", {})
    injection = ctx.injections.get(name, Injection())
    mounts = [
        *injection.mounts,
        *container_mounts(
            container, spec.get("volumes", []), node_root=ctx.node_root, pod_dir=ctx.pod_dir,
            files=True,
        ),
    ]  # fmt: skip
    own = container_env(container, pod, ctx.service_env)
    mapping = {**ctx.service_env, **own}
    env = dict(e.partition("=")[::2] for e in image.config.env)
    hostname = spec.get("nodeName", "") if spec.get("hostNetwork") else pod["metadata"]["name"]
    env |= {"HOSTNAME": hostname, **ctx.service_env, **own, **dict(injection.env)}
    context = cast(Mapping[str, Any], container).get("securityContext") or {}
    try:
        argv = runtimespec.process_args(
            [expand(a, mapping) for a in container.get("command", [])],
            [expand(a, mapping) for a in container.get("args", [])],
            image.config,
        )
        pod_context = cast(Mapping[str, Any], spec).get("securityContext") or {}
        user = runtimespec.identity(context, pod_context, image.config, image.rootfs)
    except runtimespec.RuntimeSpecError as exc:
        raise PodSpecError(f"container {name!r}: {exc}") from exc
    cwd = container.get("workingDir", "") or image.config.working_dir or "/"
    cid = runtimespec.container_id(pod["metadata"]["uid"], name)
    run = runtimespec.ContainerRun(
        rootfs=image.rootfs,
        args=tuple(argv),
        env=tuple(f"{k}={v}" for k, v in env.items()),
        cwd=cwd,
        user=user,
        hostname=hostname,
        readonly_root=bool(context.get("readOnlyRootFilesystem")),
        capabilities=runtimespec.capabilities(context),
        privileged=bool(context.get("privileged")),
        no_new_privileges=context.get("allowPrivilegeEscalation") is False,
        binds=tuple(
            runtimespec.Bind(m.host_path, m.container_path, m.readonly)
            for m in sorted(mounts, key=lambda m: len(m.container_path))  # parents first
        ),
        devices=injection.devices,
        host_pid=bool(spec.get("hostPID")),
    )
    state = ctx.runc_state
    made = itertools.count()

    def in_runc(command: Sequence[str]) -> probes.Exec:
        """An exec probe's command, run inside the container by runc.

        A PID file per probe: one probe's checks never overlap.
        """
        expanded = tuple(expand(a, mapping) for a in command)
        pid_file = ctx.pod_dir / f"probe-{name}-{next(made)}.pid"
        argv = runtimespec.exec_argv(state, cid, expanded, pid_file=pid_file)
        return probes.Exec(tuple(argv), command=expanded, pid_file=str(pid_file))

    return ContainerPlan(
        name=name,
        argv=tuple(argv),
        env=env,
        cwd=ctx.pod_dir,
        mounts=tuple(mounts),
        sidecar=container.get("restartPolicy") == "Always",
        logs_on_error=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
        probes=_probes(container, pod, in_runc),
        run=run,
        container_id=cid,
        image_id=image.image_id,
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
    """Every container of ``pod``; :class:`PodSpecError` when one cannot run."""
    spec = pod.get("spec", {})
    return PodPlan(
        init=tuple(plan_container(c, pod, ctx) for c in spec.get("initContainers", [])),
        containers=tuple(plan_container(c, pod, ctx) for c in spec.get("containers", [])),
        restart_policy=spec.get("restartPolicy", "Always"),
        termination_grace=float(spec.get("terminationGracePeriodSeconds", 30)),
    )
