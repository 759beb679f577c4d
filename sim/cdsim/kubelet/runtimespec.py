"""What a container runtime makes of a pod's container: the OCI runtime configuration for runc.

Pure. :func:`process_args`, :func:`identity` and :func:`capabilities` decide as the kubelet
and containerd decide (the image's ENTRYPOINT/CMD when the pod omits them, the user from the
security context or the image, containerd's default capability set less what is dropped);
:func:`config` writes a :class:`ContainerRun` as runc's ``config.json``. The network is the
host's: every pod address of the simulated cluster is a loopback address of this machine.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from cdsim.kubelet import imagestore

DEFAULT_CAPABILITIES = frozenset(
    {"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
     "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}
)  # fmt: skip
"""containerd's default set for a container that is not privileged."""
ALL_CAPABILITIES = frozenset(
    {"AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE",
     "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER",
     "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN",
     "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP",
     "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT",
     "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG",
     "WAKE_ALARM"}
)  # fmt: skip
"""What ``privileged: true`` (or ``add: [ALL]``) grants."""
MASKED_PATHS = (
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
)  # fmt: skip
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
_NOSUID_NOEXEC_NODEV = ["nosuid", "noexec", "nodev"]


def container_id(pod_uid: str, name: str) -> str:
    """The runtime's name for container ``name`` of the pod ``pod_uid`` (unique per cluster)."""
    return f"{pod_uid}-{name}"


def runc_argv(state: pathlib.Path, *args: str) -> list[str]:
    """``runc`` with its state (one folder per simulated cluster) and ``args``."""
    return ["runc", "--root", str(state), *args]


def exec_argv(
    state: pathlib.Path, container: str, command: Sequence[str], *, pid_file: pathlib.Path
) -> list[str]:
    """The command line that runs ``command`` inside the running ``container`` (exec probes).

    runc writes the command's PID, as this machine sees it, to ``pid_file``.
    """
    return runc_argv(state, "exec", "--pid-file", str(pid_file), container, *command)


class RuntimeSpecError(ValueError):
    """The container cannot be created as asked (the kubelet's ``CreateContainerConfigError``)."""


def process_args(
    command: Sequence[str], args: Sequence[str], image: imagestore.ImageConfig
) -> list[str]:
    """The argv, as the kubelet combines the pod's ``command``/``args`` with the image's.

    ``command`` replaces the ENTRYPOINT and drops the image's CMD; ``args`` replaces the CMD.
    """
    if command:
        return [*command, *args]
    argv = [*image.entrypoint, *(args or image.cmd)]
    if not argv:
        raise RuntimeSpecError("no command specified: neither the pod nor the image names one")
    return argv


def _lookup(rootfs: pathlib.Path, table: str, name: str) -> int | None:
    """The numeric id of ``name`` in the image's ``/etc/<table>`` (``passwd`` or ``group``)."""
    try:
        lines = (rootfs / "etc" / table).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) > 2 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    return None


def _primary_group(rootfs: pathlib.Path, uid: int) -> int:
    """The group of ``uid`` in the image's ``/etc/passwd``; 0 when it has no entry there."""
    try:
        lines = (rootfs / "etc/passwd").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        fields = line.split(":")
        if len(fields) > 3 and fields[2] == str(uid) and fields[3].isdigit():
            return int(fields[3])
    return 0


def _image_user(user: str, rootfs: pathlib.Path) -> tuple[int, int | None]:
    """``(uid, gid or None)`` of an image's ``User`` (``uid``, ``uid:gid``, names)."""
    if not user:
        return 0, None
    name, _, group = user.partition(":")
    uid = int(name) if name.isdigit() else _lookup(rootfs, "passwd", name)
    if uid is None:
        raise RuntimeSpecError(f"the image's user {name!r} is not in its /etc/passwd")
    gid: int | None = None
    if group:
        gid = int(group) if group.isdigit() else _lookup(rootfs, "group", group)
        if gid is None:
            raise RuntimeSpecError(f"the image's group {group!r} is not in its /etc/group")
    return uid, gid


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who the container's process is."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    """Supplementary groups: the pod's ``fsGroup`` and ``supplementalGroups``."""


def identity(
    container_context: Mapping[str, Any],
    pod_context: Mapping[str, Any],
    image: imagestore.ImageConfig,
    rootfs: pathlib.Path,
) -> Identity:
    """The user the kubelet asks for.

    The container's security context over the pod's over the image's ``User``;
    ``runAsNonRoot`` with a root user is refused, as the kubelet refuses it.
    """

    def setting(key: str) -> Any:
        value = container_context.get(key)
        return pod_context.get(key) if value is None else value

    run_as = setting("runAsUser")
    image_gid: int | None = None
    if run_as is not None:
        uid = int(run_as)
        if setting("runAsNonRoot") and uid == 0:
            raise RuntimeSpecError("container's runAsUser breaks non-root policy")
    else:
        named = image.user.partition(":")[0]
        if setting("runAsNonRoot") and named and not named.isdigit():
            raise RuntimeSpecError(
                f"container has runAsNonRoot and image has non-numeric user ({named}), "
                "cannot verify user is non-root"
            )
        uid, image_gid = _image_user(image.user, rootfs)
        if setting("runAsNonRoot") and uid == 0:
            raise RuntimeSpecError("container has runAsNonRoot and image will run as root")
    group = setting("runAsGroup")
    if group is not None:
        gid = int(group)
    elif image_gid is not None:
        gid = image_gid
    else:
        gid = _primary_group(rootfs, uid)
    extra = [int(g) for g in pod_context.get("supplementalGroups") or []]
    if pod_context.get("fsGroup") is not None:
        extra.append(int(pod_context["fsGroup"]))
    return Identity(uid, gid, tuple(dict.fromkeys(g for g in extra if g != gid)))


def capabilities(context: Mapping[str, Any]) -> frozenset[str]:
    """The capability set of a container: containerd's defaults, ``add``ed and ``drop``ped."""
    if context.get("privileged"):
        return ALL_CAPABILITIES
    caps = context.get("capabilities") or {}
    added = {str(c).upper().removeprefix("CAP_") for c in caps.get("add") or []}
    dropped = {str(c).upper().removeprefix("CAP_") for c in caps.get("drop") or []}
    # containerd's order: add ALL, then the drops, then each named add (drop ALL + add one
    # keeps that one).
    names = set(ALL_CAPABILITIES if "ALL" in added else DEFAULT_CAPABILITIES)
    names = set() if "ALL" in dropped else names - dropped
    return frozenset(names | (added - {"ALL"}))


@dataclasses.dataclass(frozen=True)
class Bind:
    """A folder or file of the node mounted into the container."""

    source: pathlib.Path
    destination: str
    readonly: bool = False


@dataclasses.dataclass(frozen=True)
class DeviceNode:
    """A device node the runtime creates in the container (a CDI ``deviceNodes`` entry)."""

    path: str
    major: int
    minor: int
    kind: str = "c"
    file_mode: int = 0o666
    uid: int = 0
    gid: int = 0


@dataclasses.dataclass(frozen=True)
class ContainerRun:
    """Everything runc needs to start one container."""

    rootfs: pathlib.Path
    args: tuple[str, ...]
    env: tuple[str, ...]
    """``NAME=value`` entries, the image's first, later ones winning."""
    cwd: str
    user: Identity
    hostname: str
    readonly_root: bool = False
    capabilities: frozenset[str] = DEFAULT_CAPABILITIES
    privileged: bool = False
    no_new_privileges: bool = False
    binds: tuple[Bind, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    host_pid: bool = False


def _base_mounts(privileged: bool) -> list[dict[str, Any]]:
    return [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",  # noqa: S108 - in the container
         "options": [*_NOSUID_NOEXEC_NODEV, "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": _NOSUID_NOEXEC_NODEV},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": [*_NOSUID_NOEXEC_NODEV, "rw" if privileged else "ro"]},
    ]  # fmt: skip


def config(run: ContainerRun) -> dict[str, Any]:
    """The ``config.json`` runc runs ``run`` from."""
    caps = sorted(f"CAP_{c}" for c in run.capabilities)
    mounts = _base_mounts(run.privileged)
    mounts += [
        {"destination": b.destination, "type": "bind", "source": str(b.source),
         "options": ["rbind", "rprivate", "ro" if b.readonly else "rw"]}
        for b in run.binds
    ]  # fmt: skip
    namespaces = ["ipc", "uts", "mount"] + ([] if run.host_pid else ["pid"])
    devices = [
        {"path": d.path, "type": d.kind, "major": d.major, "minor": d.minor,
         "fileMode": d.file_mode, "uid": d.uid, "gid": d.gid}
        for d in run.devices
    ]  # fmt: skip
    allowed = [{"allow": False, "access": "rwm"}]
    allowed += [
        {"allow": True, "type": d.kind, "major": d.major, "minor": d.minor, "access": "rwm"}
        for d in run.devices
    ]
    if run.privileged:
        allowed = [{"allow": True, "access": "rwm"}]
    linux: dict[str, Any] = {
        "namespaces": [{"type": t} for t in namespaces],
        "devices": devices,
        "resources": {"devices": allowed},
    }
    if not run.privileged:
        linux["maskedPaths"] = list(MASKED_PATHS)
        linux["readonlyPaths"] = list(READONLY_PATHS)
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {
                "uid": run.user.uid,
                "gid": run.user.gid,
                "additionalGids": list(run.user.groups),
            },
            "args": list(run.args),
            "env": list(run.env),
            "cwd": run.cwd or "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "noNewPrivileges": run.no_new_privileges,
        },
        "root": {"path": str(run.rootfs), "readonly": run.readonly_root},
        "hostname": run.hostname,
        "mounts": mounts,
        "linux": linux,
    }
