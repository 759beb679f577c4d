"""Keep one pod's containers running as processes, as the kubelet keeps containers running.

Init containers run in order, each to completion (retried with capped backoff when they
fail), then every container starts and is restarted per the pod's ``restartPolicy`` with
capped backoff. :meth:`PodRunner.tick` never blocks: the caller drives every pod of every
node from one loop, and stopping is SIGTERM now, SIGKILL once the grace period has passed.
Once a container has exited, :meth:`PodRunner.container_statuses` says what the kubelet would
report of it (kwok reports every container running from the start and never looks again), and
once no container will run again (``restartPolicy`` Never or OnFailure), :attr:`PodRunner.phase`
is the pod's final phase, decided by the exit codes as the kubelet decides it: so a Job's pod
succeeds or fails by what its process did.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import os
import pathlib
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from computedomains.sim import processes
from computedomains.sim.kubelet import backoff, podspec

_STABLE_SECONDS = 60.0
"""A container that ran this long before exiting restarts without the accumulated delay."""
_LOG = logging.getLogger(__name__)
HOLD_DIR = "hold"
"""A folder of the pod's own (:func:`node.pod_dir`): a file in it named after a container keeps
that container from starting, as a crash-loop backoff would; removing the file lets it start
at the next tick. Tests use it to keep a killed process down."""


class _Phase(enum.Enum):
    INIT = "init"
    RUNNING = "running"
    FAILED = "failed"
    """An init container failed under ``restartPolicy: Never``: nothing more runs."""
    TERMINATING = "terminating"


@dataclasses.dataclass
class _Container:
    plan: podspec.ContainerPlan
    init: bool
    """An init container that must complete (sidecars are not)."""
    retry: backoff.Backoff = dataclasses.field(default_factory=backoff.Backoff)
    child: processes.Managed | None = None
    started_at: float = 0.0
    completed: bool = False
    """Exited in a way that needs no restart (a finished init container, say)."""
    started_wall: datetime.datetime | None = None
    """Wall-clock time of the latest start, as the kubelet's ``startedAt``."""
    starts: int = 0
    last_exit: dict[str, Any] | None = None
    """The ``terminated`` state of the latest exit, once there was one."""
    previous_exit: dict[str, Any] | None = None
    """The ``terminated`` state of the exit before that (the kubelet's ``lastState``)."""


def _stamp(moment: datetime.datetime) -> str:
    """A time as the kubelet writes it: RFC 3339, whole seconds (rounded down)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def restarts(code: int, *, init: bool, sidecar: bool, pod_policy: str) -> bool:
    """Whether a container that exited with ``code`` is started again (after backoff).

    Sidecars always restart; init containers must succeed once (``Never`` gives up);
    containers follow the pod's ``restartPolicy``.
    """
    if sidecar:
        return True
    if init:
        return code != 0 and pod_policy != "Never"
    return pod_policy == "Always" or (pod_policy == "OnFailure" and code != 0)


def final_phase(exits: Sequence[int | None], *, init_failed: bool, pod_policy: str) -> str | None:
    """The pod's phase once it can no longer change (``Succeeded``/``Failed``), else None.

    ``exits`` holds, per container (sidecars aside), its exit code once it exited for good
    (no restart follows) and None while it runs or will run again. A failed init container
    under ``Never`` fails the pod; under ``Always`` a pod never finishes.
    """
    if init_failed:
        return "Failed"
    if pod_policy == "Always" or not exits or any(code is None for code in exits):
        return None
    return "Succeeded" if all(code == 0 for code in exits) else "Failed"


def _prepare_mounts(mounts: Sequence[podspec.Mount]) -> None:
    """Create missing host paths as the kubelet (``...OrCreate``) or a runtime would."""
    for mount in mounts:
        if mount.kind == "FileOrCreate":
            mount.host_path.parent.mkdir(parents=True, exist_ok=True)
            mount.host_path.touch(exist_ok=True)
        elif mount.kind in ("", "DirectoryOrCreate", "emptyDir"):
            mount.host_path.mkdir(parents=True, exist_ok=True)


class PodRunner:
    """The processes of one pod."""

    def __init__(
        self,
        *,
        label: str,
        plan: podspec.PodPlan,
        log_dir: pathlib.Path,
        hold_dir: pathlib.Path | None = None,
    ) -> None:
        self.label = label
        self._plan = plan
        self._log_dir = log_dir
        self._hold_dir = hold_dir
        self.version = 0
        """Grows whenever a container exits or restarts: what :meth:`container_statuses`
        says has changed."""
        self._init = [_Container(p, init=not p.sidecar) for p in plan.init]
        self._containers = [_Container(p, init=False) for p in plan.containers]
        self._phase = _Phase.INIT
        self._kill_at = 0.0

    def pids(self) -> list[int]:
        """PIDs of the processes running now."""
        return [c.child.pid for c in self._init + self._containers if c.child is not None]

    def container_statuses(
        self, reported: Sequence[Mapping[str, Any]], *, init: bool = False
    ) -> list[dict[str, Any]]:
        """``reported`` (the pod's ``containerStatuses``), corrected for every container.

        With ``init``, ``reported`` is ``initContainerStatuses``. A container that has exited
        at least once is shown as it is: running again, backing off, or done.
        """
        mine = {c.plan.name: c for c in (self._init if init else self._containers)}
        out = []
        for entry in reported:
            container = mine.get(str(entry.get("name")))
            if container is None or container.last_exit is None:
                out.append(dict(entry))
                continue
            last: dict[str, Any] = {"terminated": container.last_exit}
            if container.child is not None and container.started_wall is not None:
                state: dict[str, Any] = {"running": {"startedAt": _stamp(container.started_wall)}}
            elif container.completed:
                state = last
                last = {"terminated": container.previous_exit} if container.previous_exit else {}
            else:
                message = f"back-off restarting failed container {container.plan.name}"
                state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
            out.append({
                **entry, "state": state, "lastState": last,
                "ready": container.child is not None, "started": container.child is not None,
                "restartCount": max(0, container.starts - 1),
            })  # fmt: skip
        return out

    @property
    def phase(self) -> str | None:
        """The pod's final phase once no container runs again (see :func:`final_phase`)."""
        if self._phase is _Phase.TERMINATING:
            return None
        exits = [
            c.last_exit["exitCode"] if c.completed and c.last_exit is not None else None
            for c in self._containers
        ]
        return final_phase(
            exits, init_failed=self._phase is _Phase.FAILED, pod_policy=self._plan.restart_policy
        )

    @property
    def finished(self) -> bool:
        """True once stopping has ended with every process reaped."""
        return self._phase is _Phase.TERMINATING and not self.pids()

    def terminate(self, now: float, grace: float) -> None:
        """SIGTERM every process; SIGKILL follows after ``grace`` seconds (see :meth:`tick`)."""
        if self._phase is _Phase.TERMINATING:
            return
        self._phase = _Phase.TERMINATING
        self._kill_at = now + grace
        _LOG.info("%s: stopping %s (SIGKILL after %gs)", self.label, self.pids(), grace)
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        for container in self._init + self._containers:
            if container.child is not None and container.child.popen.poll() is None:
                container.child.popen.send_signal(sig)

    def tick(self, now: float) -> None:
        """Reap exits, start or restart what is due, escalate a slow stop to SIGKILL."""
        for container in self._init + self._containers:
            self._reap(container, now)
        if self._phase is _Phase.TERMINATING:
            if now >= self._kill_at:
                self._signal(signal.SIGKILL)
            return
        if self._phase is _Phase.INIT:
            self._tick_init(now)
        if self._phase is _Phase.RUNNING:
            for container in self._containers + [c for c in self._init if c.plan.sidecar]:
                if container.child is None and not container.completed:
                    self._start(container, now)

    def _tick_init(self, now: float) -> None:
        for container in self._init:
            if container.completed or (container.plan.sidecar and container.child is not None):
                continue
            if container.child is None:
                self._start(container, now)
            return  # the next init container waits for this one
        self._phase = _Phase.RUNNING

    def _reap(self, container: _Container, now: float) -> None:
        if container.child is None:
            return
        code = container.child.popen.poll()
        if code is None:
            return
        container.child = None
        if self._phase is _Phase.TERMINATING:
            return
        _LOG.info("%s: container %s exited with %s", self.label, container.plan.name, code)
        finished = datetime.datetime.now(datetime.UTC)
        exit_code = code if code >= 0 else 128 - code  # killed by a signal: 128 + its number
        container.previous_exit = container.last_exit
        container.last_exit = {
            "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": _stamp(container.started_wall or finished), "finishedAt": _stamp(finished),
        }  # fmt: skip
        if not restarts(code, init=container.init, sidecar=container.plan.sidecar,
                        pod_policy=self._plan.restart_policy):  # fmt: skip
            container.completed = True
            if container.init and code != 0:
                self._phase = _Phase.FAILED  # restartPolicy Never: the pod has failed
            self._changed(container)
            return
        self._changed(container)
        if now - container.started_at >= _STABLE_SECONDS:
            container.retry.reset()
        delay = container.retry.failed(now)
        _LOG.info("%s: restarting %s in %.0fs", self.label, container.plan.name, delay)

    def _start(self, container: _Container, now: float) -> None:
        if not container.retry.ready(now):
            return
        plan = container.plan
        if self._hold_dir is not None and (self._hold_dir / plan.name).exists():
            return
        container.started_at = now
        container.started_wall = datetime.datetime.now(datetime.UTC)
        try:
            _prepare_mounts(plan.mounts)
            plan.cwd.mkdir(parents=True, exist_ok=True)
            container.child = processes.start(
                plan.name, plan.argv, log_dir=self._log_dir, env=plan.env, cwd=plan.cwd
            )
        except OSError as exc:  # a missing command, say: the kubelet retries those too
            self._log_dir.mkdir(parents=True, exist_ok=True)
            with (self._log_dir / f"{plan.name}.log").open("a") as log:
                log.write(f"[sim-kubelet] cannot start {list(plan.argv)}: {exc}{os.linesep}")
            delay = container.retry.failed(now)
            _LOG.warning("%s: cannot start %s (retry in %.0fs): %s",
                         self.label, plan.name, delay, exc)  # fmt: skip
            return
        _LOG.info("%s: started %s (pid %d)", self.label, plan.name, container.child.pid)
        container.starts += 1
        if container.last_exit is not None:
            self._changed(container)

    def _changed(self, container: _Container) -> None:
        """Count a change of what :meth:`container_statuses` or :attr:`phase` reports."""
        if any(c is container for c in self._containers) or self._phase is _Phase.FAILED:
            self.version += 1
