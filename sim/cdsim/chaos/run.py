"""Play a chaos timeline on a simulated cluster with the chart installed, and judge it (I/O).

:class:`Engine` runs in four phases, printing a line for everything it does and a status line
every :attr:`Config.progress_every` seconds:

1. **The timeline** (:mod:`schedule`): each step at its time. Between steps, and right before
   each fault (whose target depends on where pods run then), it takes a snapshot
   (:mod:`observe`) every :attr:`Config.interval` seconds and checks every invariant
   (:func:`invariants.check`); a violation counts once it has held its ``hold``
   (:func:`invariants.confirm`) and is recorded once, with the seed, the timeline around it
   and the last Events. A workload request the API refuses or does not answer is tried again
   at later steps. While the API server or etcd is down on purpose, nothing is asked of it
   (no snapshot, no request): a request would only wait for its timeout and hold up the undo,
   which must come at its time.
2. **Settling**: after the last fault's undo, up to ``bounds.ready`` for every domain to be
   Ready with all its pods running and every component back; then ``bounds.quiet`` seconds of
   watching, after which nothing may have restarted (:func:`invariants.final`,
   :func:`invariants.restarted`).
3. **Teardown**: every domain left is deleted; up to ``bounds.leftovers`` for nothing to
   remain of any deleted domain.
4. **Always**, however the run ends: every fault still applied is undone (etcd resumed first),
   and the tenant namespaces are deleted.

Recovery time of a fault: from its undo (an instant fault: its injection) to the first
snapshot where everything is healthy again (:func:`invariants.healthy`); one never followed by
a healthy snapshot counts as unrecovered.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from cdsim import cluster, demo, tools, topology
from cdsim.chaos import faults, invariants, manifests, observe, report, schedule
from cdsim.chaos.snapshot import Snapshot
from computedomains import waiting
from computedomains.api import resources
from computedomains.kube import client as kube_client
from computedomains.kube import retry

STOPPING: tuple[type[Exception], ...] = (
    waiting.WaitTimeout,
    cluster.ClusterError,
    *kube_client.API_ERRORS,
)
"""What ends a run early: the cluster could not be seen or set up."""
SKIPPING: tuple[type[Exception], ...] = (faults.NoTarget, *kube_client.API_ERRORS)
"""What makes the run skip a fault."""
API_TIMEOUT = 10.0
"""Seconds a workload request may take (the snapshots' requests have the same bound)."""
RETRY_FOR = 120.0
"""Seconds a refused workload request is tried again before the run gives it up."""
RECENT = 120.0
"""A node a fault hit this recently is passed over by the next node fault, if others remain:
the kubelet's crash-loop backoff would otherwise grow with repeated kills of one container."""
BACKOFF_MEMORY = 600.0
"""The kubelet forgets a container's crashes once it ran this long (10 minutes)."""
KILLS_BEFORE_SPARING = 2
"""A replica killed this often within :data:`BACKOFF_MEMORY` is spared: a third kill would
keep it down 20 s, then 40 s, ... by the kubelet's backoff, not by anything of ours."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One run's settings."""

    seed: int
    duration: float
    bounds: invariants.Bounds = dataclasses.field(default_factory=invariants.Bounds)
    settings: schedule.Settings | None = None
    """None: :func:`schedule.settings_for` the duration."""
    interval: float = 3.0
    """Seconds between snapshots."""
    progress_every: float = 30.0


@dataclasses.dataclass
class _Retry:
    """A workload request to try again."""

    what: str
    subject: str
    """The domain or pod (``namespace/name``) it is about."""
    call: Callable[[], None]
    until: float
    give_up: Callable[[], None] | None = None
    """What to forget when it is given up (a pod or a domain that never came)."""
    dropped: bool = False
    """Forgotten (its subject was deleted meanwhile): not sent any more."""


@dataclasses.dataclass
class _Domain:
    """What the run keeps of one live domain."""

    tenant: int
    name: str
    shape: schedule.Shape
    uid: str = ""
    pods: list[int] = dataclasses.field(default_factory=list)
    """Indices of its pods now."""
    next_pod: int = 0


class Engine:
    """One chaos run against ``sim`` with the chart installed in ``release_namespace``."""

    def __init__(
        self,
        *,
        sim: cluster.SimCluster,
        release_namespace: str,
        config: Config,
        out: Callable[[str], None],
    ) -> None:
        self.sim = sim
        self.config = config
        self.out = out
        self.run_tag = f"{config.seed}-{os.getpid()}"
        api = sim.api_client()
        api.policy = retry.Policy(attempts=2)  # while the API server is away, fail fast
        self.api = api
        self.release_namespace = release_namespace
        self.observer = observe.Observer(api, sim, release_namespace, self.run_tag)
        self.injector = faults.Injector(sim, release_namespace, self._say)
        self.report = report.Report(seed=config.seed, duration=config.duration)
        self._started = time.monotonic()
        self._domains: dict[str, _Domain] = {}
        self._changed: dict[str, float] = {}
        self._deleted: dict[str, float] = {}
        self._removed: set[str] = set()
        self._exempt: set[str] = set()
        self._windows: dict[int, invariants.Window] = {}
        self._applied: dict[int, faults.Applied] = {}
        self._undo_later: list[faults.Applied] = []
        self._retries: list[_Retry] = []
        self._retrying: list[_Retry] = []
        """The requests :meth:`_retry` is sending again now."""
        self._pending: dict[str, float] = {}
        self._recorded: set[str] = set()
        self._kills: list[tuple[float, str]] = []
        """(when, pod) of every replica killed."""
        self._awaiting: list[tuple[str, str, float]] = []
        """(kind, node, since) of faults whose recovery is awaited."""
        self._prev: Snapshot | None = None
        self._last_look = -float("inf")
        self._last_progress = 0.0
        self._away_since: float | None = None
        self._tenants = 0

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> report.Report:
        """Play the whole run; the report says what happened (``report.ok``: nothing broke)."""
        racked = [n for n in self.sim.nodes if n.rack is not None]
        shape = schedule.ClusterShape(nodes=len(racked), racks=max(1, self.sim.topology.racks))
        timeline = schedule.build(
            self.config.seed, self.config.duration, shape, self.config.settings
        )
        self._tenants = (
            self.config.settings or schedule.settings_for(self.config.duration)
        ).tenants
        self._say(
            f"chaos run {self.run_tag}: seed {self.config.seed}, {self.config.duration:g}s, "
            f"{len(timeline.faults)} faults, {len(timeline.workload())} workload steps "
            f"(replay: make chaos SEED={self.config.seed} DURATION={self.config.duration:g}s)"
        )
        try:
            self._create_namespaces()
            self._started = time.monotonic()
            for step in timeline.steps:
                self._wait_until(step.at)
                self._play(step)
            self._wait_until(timeline.duration)
            self._settle()
            self._teardown()
        except KeyboardInterrupt:
            self.report.interrupted = "interrupted"
        except STOPPING as exc:
            self.report.interrupted = f"{type(exc).__name__}: {exc}"
            self._say(f"the run stopped: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug of the run's own: keep the report
            self.report.interrupted = f"the run failed: {type(exc).__name__}: {exc}"
            self._say(f"the run failed:\n{traceback.format_exc()}")
        finally:
            self._finish()
        return self.report

    def _now(self) -> float:
        return time.monotonic() - self._started

    def _say(self, text: str) -> None:
        self.out(f"[{self._now():7.1f}s] {text}")

    def _note(self, text: str) -> None:
        """Say ``text`` and keep it in the timeline."""
        self.report.timeline.append(report.Record(self._now(), text))
        self._say(text)

    def _wait_until(self, at: float) -> None:
        """Observe and check until the run's clock reaches ``at``."""

        def reached() -> bool:
            self._tick()
            return self._now() >= at

        waiting.until(
            f"the run's clock to reach {at:.1f}s",
            reached,
            timeout=max(0.0, at - self._now()) + 300,
            interval=0.2,
        )

    # -- steps ------------------------------------------------------------------------------

    def _play(self, step: schedule.Step) -> None:
        if isinstance(step, schedule.Inject):
            self._inject(step.fault)
        elif isinstance(step, schedule.Undo):
            self._undo(step.fault)
        elif isinstance(step, schedule.Create):
            self._note(schedule.describe(step))
            self._create(step)
        elif isinstance(step, schedule.Scale):
            self._note(schedule.describe(step))
            self._scale(step)
        else:
            self._note(schedule.describe(step))
            self._delete(self._key(step.tenant, step.domain), pods_first=step.pods_first)

    def _key(self, tenant: int, name: str) -> str:
        return f"{manifests.namespace_name(self.run_tag, tenant)}/{name}"

    def _create(self, step: schedule.Create) -> None:
        key = self._key(step.tenant, step.domain)
        domain = _Domain(step.tenant, step.domain, step.shape)
        self._domains[key] = domain
        self._changed[key] = self._now()

        def never_came() -> None:
            self._domains.pop(key, None)
            self._changed.pop(key, None)
            for index in domain.pods:
                pod = f"{key.split('/')[0]}/{manifests.pod_name(domain.name, index)}"
                self._forget(pod)
                self._removed.add(pod)

        self._request(
            f"create {key}", key, lambda: self._create_domain(key, domain), give_up=never_came
        )
        for _ in range(step.shape.pods):
            self._add_pod(domain)
        self.report.domains_created += 1

    def _create_domain(self, key: str, domain: _Domain) -> None:
        namespace = manifests.namespace_name(self.run_tag, domain.tenant)
        path = resources.COMPUTE_DOMAINS.path(namespace=namespace)
        try:
            body = manifests.domain(self.run_tag, domain.name, domain.shape)
            made = self.api.create(path, body, timeout=API_TIMEOUT)
        except kube_client.ApiError as exc:
            if exc.failure is not kube_client.Failure.CONFLICT:
                raise
            made = self.api.get(
                resources.COMPUTE_DOMAINS.path(domain.name, namespace=namespace),
                timeout=API_TIMEOUT,
            )
        domain.uid = str(made["metadata"]["uid"])

    def _add_pod(self, domain: _Domain) -> None:
        index = domain.next_pod
        domain.next_pod += 1
        domain.pods.append(index)
        namespace = manifests.namespace_name(self.run_tag, domain.tenant)
        body = manifests.pod(self.run_tag, domain.name, index, domain.shape.layout)

        def create() -> None:
            try:
                self.api.create(resources.PODS.path(namespace=namespace), body, timeout=API_TIMEOUT)
            except kube_client.ApiError as exc:
                if exc.failure is not kube_client.Failure.CONFLICT:
                    raise

        pod = f"{namespace}/{body['metadata']['name']}"

        def never_came() -> None:
            if index in domain.pods:
                domain.pods.remove(index)
            self._removed.add(pod)

        self._request(f"create pod {pod}", pod, create, give_up=never_came)

    def _remove_pod(self, domain: _Domain, index: int) -> None:
        namespace = manifests.namespace_name(self.run_tag, domain.tenant)
        name = manifests.pod_name(domain.name, index)
        pod = f"{namespace}/{name}"
        self._removed.add(pod)  # before the request: no snapshot may miss it
        self._forget(pod)  # a create still waiting to be tried again must not come after
        self._request(
            f"delete pod {pod}",
            pod,
            lambda: self._delete_gone(resources.PODS.path(name, namespace=namespace)),
        )

    def _delete_gone(self, path: str) -> None:
        try:
            self.api.delete(path, timeout=API_TIMEOUT)
        except kube_client.ApiError as exc:
            if exc.failure is not kube_client.Failure.NOT_FOUND:
                raise

    def _scale(self, step: schedule.Scale) -> None:
        key = self._key(step.tenant, step.domain)
        domain = self._domains.get(key)
        if domain is None:
            return
        while len(domain.pods) < step.pods:
            self._add_pod(domain)
        while len(domain.pods) > step.pods:
            self._remove_pod(domain, domain.pods.pop())
        domain.shape = domain.shape.scaled(step.pods)
        self._changed[key] = self._now()

    def _delete(self, key: str, *, pods_first: bool) -> None:
        domain = self._domains.pop(key, None)
        self._changed.pop(key, None)
        if domain is None:
            return
        namespace = manifests.namespace_name(self.run_tag, domain.tenant)
        path = resources.COMPUTE_DOMAINS.path(domain.name, namespace=namespace)

        def remove_pods() -> None:
            while domain.pods:
                self._remove_pod(domain, domain.pods.pop())

        self._forget(key)
        if pods_first:
            remove_pods()
        self._request(f"delete {key}", key, lambda: self._delete_gone(path))
        if not pods_first:
            remove_pods()
        # A domain whose create never got through has no UID: nothing of it can be left.
        if domain.uid:
            self._deleted[domain.uid] = self._now()

    def _request(
        self,
        what: str,
        subject: str,
        call: Callable[[], None],
        *,
        give_up: Callable[[], None] | None = None,
    ) -> None:
        """Send a workload request now; if the API refuses it, try again at later steps.

        While the API server or etcd is down on purpose, it waits for them without trying.
        """
        later = _Retry(what, subject, call, self._now() + RETRY_FOR, give_up)
        if self._control_plane_away():
            self._retries.append(later)
            return
        try:
            call()
        except kube_client.API_ERRORS as exc:
            self.report.actions_failed += 1
            self._say(f"{what}: {exc}; trying again")
            self._retries.append(later)

    def _forget(self, subject: str) -> None:
        """Drop the requests about ``subject`` still waiting to be tried again."""
        for item in [*self._retries, *self._retrying]:
            if item.subject == subject:
                item.dropped = True
        self._retries = [r for r in self._retries if not r.dropped]

    def _retry(self) -> None:
        self._retrying, self._retries = self._retries, []
        for item in self._retrying:
            if item.dropped:
                continue
            try:
                item.call()
            except kube_client.API_ERRORS as exc:
                if self._now() < item.until:
                    self._retries.append(item)
                    continue
                # The control plane is back (it is not asked while away): a valid request
                # refused this long is a fault of ours (a webhook failing closed, say).
                self._note(f"gave up on: {item.what} ({exc})")
                message = f"{item.what} was refused for {RETRY_FOR:g}s: {exc}"
                self._record(
                    invariants.Violation("request-refused", item.subject, message), self._now()
                )
                if item.give_up is not None:
                    item.give_up()

    # -- faults -----------------------------------------------------------------------------

    def _control_plane_away(self) -> bool:
        """Whether the API server or etcd is down on purpose now: nothing would answer."""
        return any(a.fault.kind in schedule.CONTROL_PLANE_FAULTS for a in self._applied.values())

    def _inject(self, fault: schedule.Fault) -> None:
        if fault.kind is schedule.FaultKind.NODE_NOT_READY and self._control_plane_away():
            self.report.skipped[fault.kind.value] += 1
            self._note(f"fault {fault.label} skipped: the API server is away")
            return
        seen = self._tick(force=True) or self._prev  # where the pods are right now
        now = self._now()
        recent = {w.node for w in self._windows.values() if w.node and w.start >= now - RECENT}
        active = {a.node for a in self._applied.values() if a.node}
        kills = collections.Counter(p for at, p in self._kills if at >= now - BACKOFF_MEMORY)
        spare = {p for p, n in kills.items() if n >= KILLS_BEFORE_SPARING}
        try:
            applied = self.injector.inject(fault, seen, avoid=recent | active, spare=spare)
        except SKIPPING as exc:
            self.report.skipped[fault.kind.value] += 1
            self._note(f"fault {fault.label} skipped: {exc}")
            return
        now = self._now()
        self.report.faults[fault.kind.value] += 1
        if applied.pod:
            self._kills.append((now, applied.pod))
        lasting = f", undone after {fault.lasts:g}s" if fault.lasts else ""
        self._note(f"fault {fault.label} on {applied.target} ({applied.detail}){lasting}")
        self._windows[fault.number] = invariants.Window(
            kind=fault.kind.value,
            node=applied.node,
            start=now,
            end=None if fault.lasts else now,
            breaks_fabric=applied.breaks_fabric,
        )
        if fault.lasts:
            self._applied[fault.number] = applied
        else:
            self._awaiting.append((fault.kind.value, applied.node, now))

    def _undo(self, fault: schedule.Fault) -> None:
        applied = self._applied.pop(fault.number, None)
        if applied is None:
            return  # it was skipped
        if fault.kind is schedule.FaultKind.NODE_NOT_READY and self._control_plane_away():
            self._undo_later.append(applied)  # an annotation: once the API server is back
            return
        try:
            self.injector.undo(applied)
        except faults.UNDO_ERRORS as exc:
            self._note(f"undo {fault.label} on {applied.target} failed ({exc}); trying again")
            self._undo_later.append(applied)
            return
        self._ended(applied)

    def _ended(self, applied: faults.Applied) -> None:
        now = self._now()
        window = self._windows[applied.fault.number]
        self._windows[applied.fault.number] = dataclasses.replace(window, end=now)
        self._awaiting.append((applied.fault.kind.value, applied.node, now))
        self._note(f"undid {applied.fault.label} on {applied.target}")

    def _undo_again(self) -> None:
        due, self._undo_later = self._undo_later, []
        for applied in due:
            try:
                self.injector.undo(applied)
            except faults.UNDO_ERRORS:
                self._undo_later.append(applied)
            else:
                self._ended(applied)

    # -- observing --------------------------------------------------------------------------

    def _context(self) -> invariants.Context:
        return invariants.Context(
            windows=tuple(self._windows.values()),
            expected={k: len(d.pods) for k, d in self._domains.items()},
            changed=dict(self._changed),
            deleted=dict(self._deleted),
            removed=frozenset(self._removed),
            exempt=frozenset(self._exempt),
            bounds=self.config.bounds,
        )

    def _tick(self, *, force: bool = False) -> Snapshot | None:
        """Retry what waits; every ``interval`` (or when forced) observe and check.

        Nothing while the API server or etcd is down on purpose: a request would only wait
        for its timeout and hold up the fault's undo, which is due at its time.
        """
        if self._control_plane_away():
            return None
        self._undo_again()
        self._retry()
        if not force and self._now() - self._last_look < self.config.interval:
            return None
        self._last_look = self._now()
        self.report.observations += 1
        try:
            seen = self.observer.snapshot(self._now())
        except observe.ObservationFailed as exc:
            self.report.observation_failures += 1
            if self._away_since is None:
                self._away_since = self._now()
                self._say(f"cannot see the cluster ({exc}); trying again")
            return None
        if self._away_since is not None:
            self._say(f"the cluster can be seen again after {self._now() - self._away_since:.1f}s")
            self._away_since = None
        self._exempt |= invariants.fabric_exempt(seen, self._context())
        ctx = self._context()
        counted, self._pending = invariants.confirm(
            self._pending, invariants.check(self._prev, seen, ctx), seen.at
        )
        for violation in counted:
            self._record(violation, seen.at)
        self._count(seen, ctx)
        self._prev = seen
        if seen.at - self._last_progress >= self.config.progress_every:
            self._progress(seen)
        return seen

    def _count(self, seen: Snapshot, ctx: invariants.Context) -> None:
        self.report.pods_run |= {p.uid for p in seen.pods if p.running}
        self.report.domains_formed |= {d.uid for d in seen.domains if d.ready and d.members}
        waiting_still = []
        for kind, node, since in self._awaiting:
            if invariants.healthy(seen, ctx, node=node):
                self.report.recoveries.setdefault(kind, []).append(round(seen.at - since, 1))
            else:
                waiting_still.append((kind, node, since))
        self._awaiting = waiting_still

    def _progress(self, seen: Snapshot) -> None:
        self._last_progress = seen.at
        live = [seen.domain(k) for k in self._domains]
        ready = sum(1 for d in live if d is not None and d.ready)
        running = sum(1 for p in seen.pods if p.running)
        lasting = ", ".join(a.fault.label for a in self._applied.values()) or "none"
        self._say(
            f"status: {ready}/{len(live)} domains Ready, {running}/{len(seen.pods)} pods "
            f"running, faults lasting: {lasting}, violations so far: {len(self.report.findings)}"
        )

    def _record(self, violation: invariants.Violation, at: float) -> None:
        if violation.key in self._recorded:
            self.report.repeats[violation.key] += 1
            return
        self._recorded.add(violation.key)
        tenants = [manifests.namespace_name(self.run_tag, t) for t in range(self._tenants)]
        namespaces = [*tenants, self.release_namespace, "default"]
        finding = report.Finding(
            at=at,
            violation=violation,
            seed=self.config.seed,
            timeline=report.around(self.report.timeline, at),
            events=self.observer.events(namespaces),
        )
        self.report.findings.append(finding)
        self._say(f"VIOLATION {violation.invariant}: {violation.message}")

    # -- the end ----------------------------------------------------------------------------

    def _settle(self) -> None:
        bounds = self.config.bounds
        self._note(f"every fault is undone: up to {bounds.ready:g}s for everything to be back")

        def back() -> Snapshot | None:
            seen = self._tick()
            return seen if seen is not None and self._formed(seen) else None

        first: Snapshot | None
        try:
            first = waiting.until(
                "every domain Ready and every component back",
                back,
                timeout=bounds.ready,
                interval=0.5,
            )
        except waiting.WaitTimeout:
            first = self._prev
        self._note(f"watching {bounds.quiet:g}s for restarts")
        self._wait_until(self._now() + bounds.quiet)
        last = self._tick(force=True) or self._prev
        if first is None or last is None:
            raise waiting.WaitTimeout("the cluster could not be seen at the end of the run")
        for violation in [
            *invariants.final(last, self._context()),
            *invariants.restarted(first, last),
        ]:
            self._record(violation, last.at)
        for kind, _, _ in self._awaiting:
            self.report.unrecovered[kind] += 1
        self._awaiting = []

    def _formed(self, seen: Snapshot) -> bool:
        ctx = self._context()
        if not invariants.healthy(seen, ctx):
            return False
        return all(
            (d := seen.domain(key)) is not None
            and d.ready
            and sum(p.running for p in seen.pods_of(key)) == want
            for key, want in ctx.expected.items()
        )

    def _teardown(self) -> None:
        bounds = self.config.bounds
        self._note(f"deleting the {len(self._domains)} domain(s) left")
        for number, key in enumerate(sorted(self._domains)):
            self._delete(key, pods_first=number % 2 == 0)
        asked = self._now()

        def clean() -> bool:
            seen = self._tick()
            return seen is not None and not any(
                invariants.leftovers(seen, uid) for uid in self._deleted
            )

        try:
            waiting.until(
                "nothing left of the deleted domains", clean, timeout=bounds.leftovers, interval=0.5
            )
            self._note(f"nothing left of any deleted domain after {self._now() - asked:.1f}s")
        except waiting.WaitTimeout:
            seen = self._tick(force=True) or self._prev
            if seen is None:
                raise
            for uid, when in sorted(self._deleted.items()):
                for kind, where in invariants.leftovers(seen, uid).items():
                    message = (
                        f"{seen.at - when:.0f}s after domain {uid} was deleted (at the end), "
                        f"its {kind} remain: {', '.join(sorted(where))}"
                    )
                    self._record(
                        invariants.Violation("leftover", f"{uid}:{kind}", message), seen.at
                    )

    def _finish(self) -> None:
        """Undo every fault still applied and delete the tenant namespaces, whatever happened."""
        still = [*self._applied.values(), *self._undo_later]
        self._applied, self._undo_later = {}, []
        for applied in faults.undo_all(self.injector, still, self._say):
            self.report.interrupted = self.report.interrupted or "a fault could not be undone"
            self._note(f"STILL APPLIED: {applied.fault.label} on {applied.target}")
        for tenant in range(self._tenants):
            name = manifests.namespace_name(self.run_tag, tenant)
            try:
                self._delete_gone(resources.NAMESPACES.path(name))
            except kube_client.API_ERRORS as exc:
                self._say(f"could not delete namespace {name}: {exc}")
        counts: dict[str, Any] = collections.Counter(
            f.violation.invariant for f in self.report.findings
        )
        self._say(f"done: {len(self.report.findings)} violation(s) {dict(counts) or ''}".rstrip())

    def _create_namespaces(self) -> None:
        for tenant in range(self._tenants):
            body = manifests.namespace(self.run_tag, tenant)
            self.api.create(resources.NAMESPACES.path(), body)
            name = body["metadata"]["name"]
            path = resources.SERVICE_ACCOUNTS.path("default", namespace=name)

            def account(path: str = path) -> dict[str, Any] | None:
                return self.api.find(path)

            # The ServiceAccount admission refuses pods until the namespace's default exists.
            waiting.until(
                f"ServiceAccount {name}/default",
                account,
                timeout=60,
                retry_on=kube_client.API_ERRORS,
            )


def on_a_cluster_of_its_own(
    *,
    config: Config,
    chart: pathlib.Path,
    values: Sequence[pathlib.Path],
    racks: int,
    report_file: pathlib.Path | None,
    out: Callable[[str], None],
) -> int:
    """``cdsim chaos``: a fresh simulated cluster, the chart from its registry, one run.

    As ``cdsim demo`` sets up its cluster (:mod:`cdsim.demo`). Prints the report, writes it as
    JSON to ``report_file``; the exit code is 0 only for a run without violations.
    """
    demo.interrupt_on_sigterm()
    box = tools.ToolBox.from_env()
    sim = cluster.SimCluster(
        name=f"chaos-{os.getpid()}", topology_spec=topology.Topology(racks=racks), toolbox=box
    )
    try:
        box.ensure_all(["etcd", "kubernetes", "kwok", "helm3"])
        state = sim.start()
        out(f"simulated cluster {sim.name} up: {state.nodes} nodes, kubeconfig {state.kubeconfig}")
        api = sim.api_client()
        published = demo.publish_build(box, state, chart, out=out)
        demo.install_chart(box, state, api, published, values=values, out=out)
        demo.wait_plugins(api, len(sim.nodes), out=out)
        engine = Engine(sim=sim, release_namespace=demo.DRIVER_NAMESPACE, config=config, out=out)
        result = engine.run()
    except KeyboardInterrupt:
        out("interrupted before the run began")
        return 130
    except (waiting.WaitTimeout, cluster.ClusterError, tools.ToolError, RuntimeError) as exc:
        out(f"error: {exc}")
        return 1
    finally:
        out("stopping the simulated cluster...")
        sim.stop()
    out(result.render())
    if report_file is not None:
        report_file.parent.mkdir(parents=True, exist_ok=True)
        report_file.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        out(f"report: {report_file}")
    return 0 if result.ok else 1
