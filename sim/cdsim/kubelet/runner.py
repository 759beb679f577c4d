"""Keep one pod's containers running, as the kubelet keeps containers running.

Init containers run in order, each to completion (retried with the kubelet's crash-loop
backoff when they fail), then every container starts and is restarted per the pod's
``restartPolicy`` with that backoff: the first restart at once, then 10 s doubling to 300 s,
forgotten once a container ran for 10 minutes. Each running container's startup, liveness and
readiness probes run as the kubelet runs them (:mod:`probes`): a container is started once
its startup probe passed, ready while its readiness probe passes, and killed (SIGTERM, then
SIGKILL after the grace period) and restarted by its policy when its startup or liveness
probe fails. :meth:`PodRunner.tick` never blocks: checks run on the :class:`probes.Prober`'s
threads and are collected on a later tick. :meth:`PodRunner.status` is the pod status the
kubelet would write (:mod:`status`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import enum
import logging
import os
import pathlib
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdsim import processes
from cdsim.kubelet import backoff, containers, podspec, probes
from cdsim.kubelet import status as pod_status

CRASH_BACKOFF_INITIAL = 10.0
"""The kubelet's first crash-loop delay (seconds); it doubles per crash."""
CRASH_BACKOFF_CAP = 300.0
"""The kubelet's longest crash-loop delay."""
_STABLE_SECONDS = 2 * CRASH_BACKOFF_CAP
"""A container that ran this long before exiting restarts without the accumulated delay."""
_LOG = logging.getLogger(__name__)
HOLD_DIR = "hold"
"""A folder of the pod's own (:func:`node.pod_dir`): a file in it named after a container keeps
that container from starting, as a crash-loop backoff would; removing the file lets it start
at the next tick. Tests use it to keep a killed process down."""

ProbeEvent = Callable[[str, str, bool], None]
"""``(reason, message, warning)``: what the runner reports as a pod Event (``Unhealthy``,
``Killing``)."""


class _Phase(enum.Enum):
    INIT = "init"
    RUNNING = "running"
    FAILED = "failed"
    """An init container failed under ``restartPolicy: Never``: nothing more runs."""
    TERMINATING = "terminating"


def _crash_backoff() -> backoff.Backoff:
    return backoff.Backoff(initial=CRASH_BACKOFF_INITIAL, cap=CRASH_BACKOFF_CAP, first_free=True)


@dataclasses.dataclass
class _Container:
    plan: podspec.ContainerPlan
    init: bool
    """An init container that must complete (sidecars are not)."""
    retry: backoff.Backoff = dataclasses.field(default_factory=_crash_backoff)
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
    trackers: dict[probes.ProbeKind, probes.Tracker] = dataclasses.field(default_factory=dict)
    """The probes of the running process (new ones at each start)."""
    checks: dict[probes.ProbeKind, concurrent.futures.Future[probes.Result]] = dataclasses.field(
        default_factory=dict
    )
    """Checks in flight."""
    kill_at: float | None = None
    """A probe failed: SIGTERM was sent and SIGKILL follows at this time."""

    @property
    def started(self) -> bool:
        """Running, and past its startup probe if it has one."""
        if self.child is None:
            return False
        startup = self.trackers.get(probes.ProbeKind.STARTUP)
        return startup is None or bool(startup.result)

    @property
    def ready(self) -> bool:
        """Started, and passing its readiness probe if it has one (not while being killed)."""
        if not self.started or self.kill_at is not None:
            return False
        readiness = self.trackers.get(probes.ProbeKind.READINESS)
        return readiness is None or readiness.passing


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


def stopped_phase(exits: Sequence[int | None]) -> str:
    """The terminal phase a kubelet writes for a pod it stopped because it was deleted.

    Since Kubernetes 1.27 the kubelet moves a deleted pod to ``Succeeded`` (every container
    exited 0) or ``Failed`` before it removes the object; the ResourceClaim controller frees a
    pod's claims only then, and the garbage collector deletes them before a pod deleted in the
    foreground may go.
    """
    return "Succeeded" if exits and all(code == 0 for code in exits) else "Failed"


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
        elif mount.kind in ("", "DirectoryOrCreate"):
            mount.host_path.mkdir(parents=True, exist_ok=True)
        elif mount.kind == "files" and not mount.host_path.exists():
            mount.host_path.mkdir(parents=True)  # a volume with no files (all optional)
        elif mount.kind == "emptyDir":
            mount.host_path.mkdir(parents=True, exist_ok=True)
            mount.host_path.chmod(0o777)  # as the kubelet makes it: any container user writes


class PodRunner:
    """The processes of one pod, and their probes."""

    def __init__(
        self,
        *,
        label: str,
        plan: podspec.PodPlan,
        log_dir: pathlib.Path,
        prober: probes.Prober,
        hold_dir: pathlib.Path | None = None,
        on_event: ProbeEvent | None = None,
        runtime: containers.Runc | None = None,
        bundles: pathlib.Path | None = None,
    ) -> None:
        """Keep ``plan``'s containers running.

        ``runtime`` and ``bundles`` (a folder per container below it) run the containers
        planned from an image (:attr:`podspec.ContainerPlan.run`).
        """
        self.label = label
        self._runtime = runtime
        self._bundles = bundles
        self._plan = plan
        self._log_dir = log_dir
        self._prober = prober
        self._hold_dir = hold_dir
        self._on_event = on_event or (lambda reason, message, warning: None)
        self._init = [_Container(p, init=not p.sidecar) for p in plan.init]
        self._containers = [_Container(p, init=False) for p in plan.containers]
        self._phase = _Phase.INIT
        self._initialized = False
        """Every init container completed (stays so while the pod stops)."""
        self._kill_at = 0.0

    @property
    def in_containers(self) -> bool:
        """Some container runs from its image under runc."""
        return any(c.plan.run is not None for c in self._init + self._containers)

    def pids(self) -> list[int]:
        """PIDs of the processes running now."""
        return [c.child.pid for c in self._init + self._containers if c.child is not None]

    # -- status ---------------------------------------------------------------------------

    def _view(self, container: _Container, *, before_start: str) -> pod_status.ContainerView:
        view = pod_status.ContainerView(
            name=container.plan.name,
            state=pod_status.State.WAITING,
            reason=before_start,
            exit=container.last_exit,
            previous_exit=container.previous_exit,
            restarts=max(0, container.starts - 1),
            image_id=container.plan.image_id,
        )
        if container.child is not None and container.started_wall is not None:
            return dataclasses.replace(
                view,
                state=pod_status.State.RUNNING,
                reason="",
                started_at=pod_status.stamp(container.started_wall),
                # An init container that must complete is ready only once it has.
                ready=container.ready and not container.init,
                started=container.started,
            )
        if container.completed:
            # A completed init container is ready, as the kubelet reports it.
            succeeded = (container.last_exit or {}).get("exitCode") == 0
            return dataclasses.replace(
                view,
                state=pod_status.State.TERMINATED,
                reason="",
                ready=container.init and succeeded,
            )
        if container.last_exit is None:
            return view
        message = f"back-off restarting failed container {container.plan.name}"
        return dataclasses.replace(view, reason="CrashLoopBackOff", message=message)

    def status(
        self,
        *,
        images: Mapping[str, str],
        gates: Sequence[str],
        conditions: Sequence[Mapping[str, Any]],
    ) -> dict[str, Any]:
        """The pod status the kubelet would write now: phase, conditions, container statuses.

        ``images`` maps container names to their images; ``gates`` are the pod's readiness
        gates and ``conditions`` its conditions now (for their transition times and gates).
        """
        now = pod_status.stamp(datetime.datetime.now(datetime.UTC))
        initializing = not self._initialized
        init_views = [self._view(c, before_start="PodInitializing") for c in self._init]
        main_views = [
            self._view(c, before_start="PodInitializing" if initializing else "ContainerCreating")
            for c in self._containers
        ]
        final = self.phase
        init_only = [v for v, c in zip(init_views, self._init, strict=True) if c.init]
        sidecars = [v for v, c in zip(init_views, self._init, strict=True) if not c.init]
        initialized = self._initialized
        pod_conditions = pod_status.conditions(
            init=init_only, sidecars=sidecars, containers=main_views, initialized=initialized,
            final=final, gates=gates, previous=conditions, now=now,
        )  # fmt: skip
        body: dict[str, Any] = {
            "phase": pod_status.phase(initialized=initialized, containers=main_views, final=final),
            "conditions": pod_conditions,
            "containerStatuses": [
                pod_status.container_status(v, images.get(v.name, "")) for v in main_views
            ],
        }
        if init_views:
            body["initContainerStatuses"] = [
                pod_status.container_status(v, images.get(v.name, "")) for v in init_views
            ]
        return body

    @property
    def phase(self) -> str | None:
        """The pod's final phase once no container runs again (see :func:`final_phase`).

        Once stopped (:meth:`terminate`, every process reaped): :func:`stopped_phase`.
        """
        exits = [
            c.last_exit["exitCode"] if c.completed and c.last_exit is not None else None
            for c in self._containers
        ]
        if self._phase is _Phase.TERMINATING:
            return stopped_phase(exits) if self.finished else None
        return final_phase(
            exits, init_failed=self._phase is _Phase.FAILED, pod_policy=self._plan.restart_policy
        )

    @property
    def finished(self) -> bool:
        """True once stopping has ended with every process reaped."""
        return self._phase is _Phase.TERMINATING and not self.pids()

    # -- lifecycle ------------------------------------------------------------------------

    def terminate(self, now: float, grace: float) -> None:
        """SIGTERM every process; SIGKILL follows after ``grace`` seconds (see :meth:`tick`)."""
        if self._phase is _Phase.TERMINATING:
            self._kill_at = min(self._kill_at, now + grace)  # a shorter grace asked later wins
            return
        self._phase = _Phase.TERMINATING
        self._kill_at = now + grace
        _LOG.info("%s: stopping %s (SIGKILL after %gs)", self.label, self.pids(), grace)
        for container in self._init + self._containers:
            self._signal(container, signal.SIGTERM)

    def _signal(self, container: _Container, sig: signal.Signals) -> None:
        if container.child is None or container.child.popen.poll() is not None:
            return
        if sig is signal.SIGKILL and container.plan.run is not None and self._runtime:
            # runc forwards what it is sent to the container, but it cannot forward SIGKILL.
            self._runtime.kill(container.plan.container_id, sig)
        else:
            container.child.popen.send_signal(sig)

    def tick(self, now: float) -> None:
        """Reap exits, run probes, start or restart what is due, escalate a slow stop."""
        for container in self._init + self._containers:
            self._reap(container, now)
        if self._phase is _Phase.TERMINATING:
            if now >= self._kill_at:
                for container in self._init + self._containers:
                    self._signal(container, signal.SIGKILL)
            return
        for container in self._init + self._containers:
            if container.child is not None:
                self._probe(container, now)
        if self._phase is _Phase.INIT:
            self._tick_init(now)
        if self._phase is _Phase.RUNNING:
            for container in self._containers + [c for c in self._init if c.plan.sidecar]:
                if container.child is None and not container.completed:
                    self._start(container, now)

    def _tick_init(self, now: float) -> None:
        for container in self._init:
            if container.completed:
                continue
            if container.plan.sidecar and container.child is not None:
                if container.started:
                    continue  # a sidecar must have started before the next init container
                return
            if container.child is None:
                self._start(container, now)
            return  # the next init container waits for this one
        self._phase = _Phase.RUNNING
        self._initialized = True

    # -- probes ---------------------------------------------------------------------------

    def _probe(self, container: _Container, now: float) -> None:
        if container.kill_at is not None:
            if now >= container.kill_at:
                self._signal(container, signal.SIGKILL)
            return
        for kind, tracker in container.trackers.items():
            check = container.checks.get(kind)
            if check is not None and check.done():
                del container.checks[kind]
                self._record(container, tracker, check.result(), now)
                if container.kill_at is not None:
                    return
        for kind, tracker in container.trackers.items():
            if kind in container.checks or not tracker.due(now):
                continue
            if kind is not probes.ProbeKind.STARTUP and not container.started:
                continue  # liveness and readiness wait for the startup probe
            tracker.scheduled(now)
            container.checks[kind] = self._prober.submit(tracker.probe)

    def _record(
        self, container: _Container, tracker: probes.Tracker, result: probes.Result, now: float
    ) -> None:
        probe = tracker.probe
        name = container.plan.name
        if not result.ok:
            self._on_event("Unhealthy", f"{probe.what} failed: {result.message}", True)
        change = tracker.record(result)
        if change is probes.Change.NONE:
            return
        _LOG.info("%s: %s %s of %s", self.label, probe.what, change.value, name)
        if change is probes.Change.FAILED and probe.kind is not probes.ProbeKind.READINESS:
            grace = probe.termination_grace
            if grace is None:
                grace = self._plan.termination_grace
            message = f"Container {name} failed {probe.kind.value} probe, will be restarted"
            self._on_event("Killing", message, False)
            _LOG.info("%s: %s (SIGKILL after %gs)", self.label, message, grace)
            container.kill_at = now + grace
            self._signal(container, signal.SIGTERM)

    # -- processes ------------------------------------------------------------------------

    def _reap(self, container: _Container, now: float) -> None:
        if container.child is None:
            return
        code = container.child.popen.poll()
        if code is None:
            return
        container.child = None
        if container.plan.run is not None and self._runtime and self._bundles:
            self._runtime.remove(container.plan.container_id, self._bundles / container.plan.name)
        for check in container.checks.values():
            check.cancel()
        container.checks.clear()
        container.trackers.clear()
        container.kill_at = None
        _LOG.info("%s: container %s exited with %s", self.label, container.plan.name, code)
        finished = datetime.datetime.now(datetime.UTC)
        exit_code = code if code >= 0 else 128 - code  # killed by a signal: 128 + its number
        container.previous_exit = container.last_exit
        container.last_exit = {
            "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": pod_status.stamp(container.started_wall or finished),
            "finishedAt": pod_status.stamp(finished),
        }  # fmt: skip
        if exit_code != 0 and container.plan.logs_on_error:
            log = self._log_dir / f"{container.plan.name}.log"
            with contextlib.suppress(OSError):
                container.last_exit["message"] = pod_status.log_tail_message(log.read_bytes())
        if self._phase is _Phase.TERMINATING:
            container.completed = True  # stopped for good: its exit is the pod's last word
            return
        if not restarts(code, init=container.init, sidecar=container.plan.sidecar,
                        pod_policy=self._plan.restart_policy):  # fmt: skip
            container.completed = True
            if container.init and code != 0:
                self._phase = _Phase.FAILED  # restartPolicy Never: the pod has failed
            return
        if now - container.started_at >= _STABLE_SECONDS:
            container.retry.reset()
        delay = container.retry.failed(now)
        _LOG.info("%s: restarting %s in %.0fs", self.label, container.plan.name, delay)

    def _launch(self, plan: podspec.ContainerPlan) -> processes.Managed:
        if plan.run is None:
            return processes.start(
                plan.name, plan.argv, log_dir=self._log_dir, env=plan.env, cwd=plan.cwd
            )
        if self._runtime is None or self._bundles is None:
            raise containers.ContainerError("no container runtime for a container from an image")
        bundle = self._bundles / plan.name
        self._runtime.create(bundle, plan.run)
        return self._runtime.start(plan.container_id, bundle, name=plan.name, log_dir=self._log_dir)

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
            container.child = self._launch(plan)
        except (OSError, containers.ContainerError) as exc:  # the kubelet retries those too
            self._log_dir.mkdir(parents=True, exist_ok=True)
            with (self._log_dir / f"{plan.name}.log").open("a") as log:
                log.write(f"[sim-kubelet] cannot start {list(plan.argv)}: {exc}{os.linesep}")
            delay = container.retry.failed(now)
            _LOG.warning("%s: cannot start %s (retry in %.0fs): %s",
                         self.label, plan.name, delay, exc)  # fmt: skip
            return
        _LOG.info("%s: started %s (pid %d)", self.label, plan.name, container.child.pid)
        container.starts += 1
        container.trackers = {p.kind: probes.Tracker(p, started_at=now) for p in plan.probes}
