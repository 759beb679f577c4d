"""Containers under runc: create, start, signal, exec into and remove, as a node's runtime does.

Each container gets a bundle folder of its own (``config.json`` and an overlay root: the
image's unpacked files as the read-only lower layer, a writable layer per container above
them, as containerd's snapshots give). runc keeps its state in one folder per simulated
cluster, so a cluster that stops finds and removes every container it ran
(:func:`remove_all`), even those whose ``runc run`` was killed.

``runc run`` runs in the foreground as the container's stand-in process: its exit status is
the container's, and it forwards the signals it gets (SIGTERM) to the container's first
process. SIGKILL cannot be forwarded, so :meth:`Runc.kill` asks runc to send it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import pathlib
import shutil
import signal
import subprocess
from collections.abc import Sequence

from cdsim import processes
from cdsim.kubelet import runtimespec

_LOG = logging.getLogger(__name__)
_TIMEOUT = 60.0


class ContainerError(RuntimeError):
    """A container could not be created; the message is runc's or mount's own."""


def _run(argv: Sequence[str], what: str, *, timeout: float = _TIMEOUT) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ContainerError(f"{what} did not finish in {timeout:.0f}s") from None
    if done.returncode != 0:
        raise ContainerError(f"{what}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


STATE_DIR = "runc"
"""runc's state folder in a cluster's folder: every container that cluster runs."""


def _mount_points() -> list[pathlib.Path]:
    try:
        table = pathlib.Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    return [pathlib.Path(line.split()[4]) for line in table.splitlines() if line.strip()]


def _unmount(path: pathlib.Path) -> None:
    with contextlib.suppress(ContainerError):
        _run(["umount", "--lazy", str(path)], "overlay unmount")


def unmount_under(folder: pathlib.Path) -> list[pathlib.Path]:
    """Unmount every container root below ``folder`` (a pod's, or a whole cluster's)."""
    folder = folder.resolve()
    found = [m for m in _mount_points() if m.is_relative_to(folder) and m != folder]
    for mount in sorted(found, key=lambda m: len(m.parts), reverse=True):
        _unmount(mount)
    return found


class Runc:
    """runc with its state under ``state`` (one folder per simulated cluster)."""

    def __init__(self, state: pathlib.Path) -> None:
        self.state = state
        if shutil.which("runc") is None:
            raise ContainerError("runc not found on PATH: install Debian's runc package")

    def _runc(self, *args: str) -> list[str]:
        return runtimespec.runc_argv(self.state, *args)

    def create(self, bundle: pathlib.Path, run: runtimespec.ContainerRun) -> None:
        """Write ``bundle``: an overlay root and the configuration of ``run``.

        The overlay's lower layer is ``run.rootfs`` (the image's unpacked files, never
        written). A bundle left by an earlier start of the same container is replaced (its writable
        layer goes, as a restarted container starts from the image again).
        """
        bundle = bundle.resolve()  # as the mount table will name it
        self.release(bundle)
        upper, work, merged = bundle / "upper", bundle / "work", bundle / "rootfs"
        for folder in (upper, work, merged):
            folder.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={run.rootfs},upperdir={upper},workdir={work}"
        _run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], "overlay mount")
        document = runtimespec.config(dataclasses.replace(run, rootfs=merged))
        (bundle / "config.json").write_text(json.dumps(document, indent=1))

    def start(self, container_id: str, bundle: pathlib.Path, *, name: str,
              log_dir: pathlib.Path) -> processes.Managed:  # fmt: skip
        """``runc run`` in the foreground, its output (the container's) to ``<name>.log``."""
        self.state.mkdir(parents=True, exist_ok=True)
        self._delete(container_id)  # one left by a start whose runc was killed
        argv = self._runc("run", "--bundle", str(bundle), container_id)
        return processes.start(name, argv, log_dir=log_dir, env={"PATH": "/usr/sbin:/usr/bin"})

    def kill(self, container_id: str, sig: signal.Signals) -> None:
        """Send ``sig`` to the container's first process (nothing when it is gone)."""
        subprocess.run(
            self._runc("kill", container_id, sig.name), capture_output=True, check=False,
            timeout=_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def _delete(self, container_id: str) -> None:
        subprocess.run(
            self._runc("delete", "--force", container_id), capture_output=True, check=False,
            timeout=_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def remove(self, container_id: str, bundle: pathlib.Path) -> None:
        """Remove the container (killing what is left of it) and its bundle."""
        self._delete(container_id)
        self.release(bundle)

    @staticmethod
    def release(bundle: pathlib.Path) -> None:
        """Unmount the bundle's root and remove the bundle."""
        merged = bundle.resolve() / "rootfs"
        if merged in _mount_points():
            _unmount(merged)
        shutil.rmtree(bundle, ignore_errors=True)

    def containers(self) -> list[tuple[str, pathlib.Path]]:
        """``(id, bundle)`` of every container runc knows under this state folder."""
        if not self.state.exists():
            return []
        try:
            listed = json.loads(_run(self._runc("list", "--format", "json"), "runc list") or "[]")
        except (ContainerError, ValueError):
            return []
        return [(str(c["id"]), pathlib.Path(c["bundle"])) for c in listed or []]

    def remove_all(self, cluster_dir: pathlib.Path | None = None) -> list[str]:
        """Remove every container of this state folder; returns their ids.

        With ``cluster_dir``, also unmount container roots left below it by a start that
        never reached runc.
        """
        found = self.containers()
        for container_id, bundle in found:
            self.remove(container_id, bundle)
        if found:
            _LOG.info("removed containers %s", [c for c, _ in found])
        if cluster_dir is not None:
            unmount_under(cluster_dir)
        return [c for c, _ in found]
