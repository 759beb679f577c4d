"""Running a command from an image's root filesystem under runc, as the chart runs a container.

:func:`config` builds the OCI runtime configuration (pure): the pod's user, a read-only
root, no capabilities, no new privileges, a tmpfs ``/tmp``. :func:`run` writes it into a
bundle and runs it to completion with runc's state kept in a folder of its own.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import uuid
from collections.abc import Sequence
from typing import Any

from cdsim.image import spec

_NOSUID_NODEV = ["nosuid", "noexec", "nodev"]


def _mounts(
    tmpfs: Sequence[str], binds: Sequence[tuple[pathlib.Path, str]]
) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        },
        {
            "destination": "/dev/shm",  # noqa: S108 - inside the container
            "type": "tmpfs",
            "source": "shm",
            "options": [*_NOSUID_NODEV, "mode=1777", "size=65536k"],
        },
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": [*_NOSUID_NODEV, "ro"],
        },
    ]
    mounts += [
        {
            "destination": path,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "mode=1777", "size=65536k"],
        }
        for path in tmpfs
    ]
    mounts += [
        {
            "destination": destination,
            "type": "bind",
            "source": str(source),
            "options": ["rbind", "ro", "nosuid", "nodev"],
        }
        for source, destination in binds
    ]
    return mounts


def config(
    rootfs: pathlib.Path,
    args: Sequence[str],
    *,
    uid: int = spec.UID,
    gid: int = spec.UID,
    env: Sequence[str] = spec.ENV,
    tmpfs: Sequence[str] = ("/tmp",),  # noqa: S108 - inside the container
    binds: Sequence[tuple[pathlib.Path, str]] = (),
    readonly: bool = True,
) -> dict[str, Any]:
    """The runtime configuration of one container: chart defaults, no capability at all.

    ``binds``: (host folder, container path) pairs mounted read-only, as the chart's
    hostPath volumes (a node's driver root).
    """
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, "additionalGids": [gid]},
            "args": list(args),
            "env": [*env, "HOME=/nonexistent"],
            "cwd": spec.WORKING_DIR,
            "capabilities": {k: [] for k in ("bounding", "effective", "permitted", "ambient")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": readonly},
        "hostname": "compute-domains",
        "mounts": _mounts(tmpfs, binds),
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": [
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger",
            ],
        },
    }


def run(
    bundle: pathlib.Path,
    rootfs: pathlib.Path,
    *,
    args: Sequence[str],
    timeout: float = 120,
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in a container of ``rootfs`` (see :func:`config` for ``options``)."""
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config(rootfs, args, **options), indent=1))
    state = bundle / "state"
    state.mkdir(exist_ok=True)
    name = f"cd-image-{uuid.uuid4().hex[:12]}"
    try:
        return subprocess.run(
            ["runc", "--root", str(state), "run", "--bundle", str(bundle), name],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    finally:
        subprocess.run(
            ["runc", "--root", str(state), "delete", "--force", name],
            capture_output=True,
            check=False,
            timeout=60,
        )
