"""The IMEX agent: watch the node and its clique, decide, act on IMEX, report; until SIGTERM.

One loop thread does everything that changes state, so decisions never race: it wakes when
a watched object changes, when IMEX exits, or when something it scheduled falls due (a
backoff, a reload, a health check, a condition retry), and otherwise sleeps.
"""

from __future__ import annotations

import datetime
import logging
import math
import signal
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import prometheus_client

from computedomains import httpserver, trace
from computedomains.api import constants, fabricverdict, imex, models, placement, resources
from computedomains.api.schema import ValidationError
from computedomains.imexagent import config, decide, metrics, render, report, supervisor
from computedomains.kube import client as kube_client
from computedomains.kube import cliquewatch
from computedomains.kube.informer import Informer

log = logging.getLogger(__name__)
FABRIC_REREAD = 10.0
"""Seconds between reads of the fabric verdict (node-init rewrites it when the fabric changes)."""
MAX_SLEEP = 30.0
ERROR_PAUSE = 2.0
HEARTBEAT_LIMIT = 120.0
"""Seconds without a loop pass after which /healthz fails: far above the longest pass."""


def utc_now() -> datetime.datetime:
    """The wall clock, for the timestamps others compare with theirs (the node's clock)."""
    return datetime.datetime.now(datetime.UTC)


def daemons_of(obj: dict[str, Any]) -> tuple[decide.Daemon, ...] | None:
    """The ``daemons`` of a clique object; None when it does not parse."""
    try:
        clique = models.parse_clique(obj, strict=False)
    except ValidationError as exc:
        log.warning("ignoring clique %s: %s", obj.get("metadata", {}).get("name"), exc)
        return None
    return tuple(decide.Daemon(d.node_name, d.ip_address, d.index) for d in clique.daemons)


def next_step(
    snapshot: decide.Snapshot,
    running: decide.Running | None,
    gates: decide.Gates,
    *,
    now: float,
) -> tuple[decide.Target, decide.Step]:
    """What IMEX should run with and the step towards it (:mod:`decide`).

    A step (not "nothing to do") is logged at DEBUG with what it was decided from.
    """
    target = decide.target(snapshot)
    planned = decide.step(target, running, gates, now=now)
    if planned.action is decide.Action.NONE:
        return target, planned  # the loop's every turn: nothing to do is no decision worth a line
    when = "now" if planned.at <= now else f"in {planned.at - now:.1f}s"
    action = f"{planned.action.value} {when}"
    member, peers = target.membership, "-"
    if running is not None and member is not None:
        peers = "same" if running.hosts == member.hosts else "changed"
    log.debug(
        "IMEX on node %s: %s; target %s, domain %s (%s); running for domain %s; peers %s",
        snapshot.node_name, action, target.mode.value, target.domain_uid or "none",
        target.note, running.domain_uid if running is not None else "none", peers,
    )  # fmt: skip
    return target, planned


class Agent:
    """The agent of one node."""

    def __init__(
        self,
        cfg: config.AgentConfig,
        *,
        api: kube_client.Client,
        stats: metrics.AgentMetrics,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = utc_now,
    ) -> None:
        self._cfg = cfg
        self._api = api
        self._clock = clock
        self.start = imex.AgentStart.new(cfg.pod_uid, now=wall())
        """This run's identity, on everything it reports."""
        self._wake = threading.Event()
        self._supervisor = supervisor.Supervisor(
            binary=cfg.imex_binary,
            ctl=cfg.imex_ctl,
            config_file=cfg.config_file,
            start_timeout=cfg.imex_start_timeout,
            stop_timeout=cfg.imex_stop_timeout,
            stats=stats,
            on_exit=self._wake.set,
            command_port=(cfg.pod_ip, render.CMD_PORT),
        )
        self._files = report.ImexFiles(cfg)
        self._reporter = report.Reporter(api, cfg, start=self.start, wall=wall)
        self._node: Informer | None = None
        """Its Node: the label a controller from before the record left (``recorded_holder``)."""
        self._cliques = cliquewatch.CliqueWatch(
            api, namespace=cfg.namespace, on_change=self._wake.set
        )
        self._verdict = fabricverdict.FabricTracker(
            cfg.fabric_verdict_file, grace=cfg.fault_grace, clock=clock
        )
        self._fabric = ("", "")
        self._fabric_due = -math.inf
        self._trace = trace.Tracer("imex-agent")
        self._member: tuple[str, int] | None = None
        """The (domain, slot) last traced as seen."""
        self.heartbeat = clock()
        stats.track(self._state)

    def wake(self) -> None:
        """Make the loop pass now (a stop request, say)."""
        self._wake.set()

    # -- probes -------------------------------------------------------------------------

    def liveness(self) -> tuple[bool, str]:
        """The loop made a pass recently."""
        age = self._clock() - self.heartbeat
        return age < HEARTBEAT_LIMIT, f"last loop pass {age:.0f}s ago"

    def readiness(self) -> tuple[bool, str]:
        """Ready once the node's state is reported, whether IMEX runs or not."""
        current = self._reporter.current
        if current is None:
            return False, "no report yet (waiting for the first list of the node and clique)"
        return True, f"{current.state.value} ({current.message})"

    # -- loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then stop IMEX."""
        self._node = Informer(
            self._api,
            path=resources.NODES.path(),
            field_selector=f"metadata.name={self._cfg.node_name}",
            on_change=lambda kind, obj: self._wake.set(),
            on_relist=self._wake.set,
        )
        self._node.start()
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    due = self._iterate()
                except Exception:
                    log.exception("agent loop failed; retrying in %gs", ERROR_PAUSE)
                    due = self._clock() + ERROR_PAUSE
                self._wake.wait(max(0.0, min(due - self._clock(), MAX_SLEEP)))
        finally:
            self._shutdown()

    def _iterate(self) -> float:
        now = self._clock()
        self.heartbeat = now
        if now >= self._fabric_due:
            fabric = self._verdict.read()
            self._fabric = fabric.clique, fabric.why_no_clique
            self._fabric_due = now + FABRIC_REREAD
        self._cliques.follow(self._fabric[0])
        if not self._listed():
            return min(now + 0.5, self._fabric_due)
        self._supervisor.reap(now=now)
        target, planned = next_step(
            self._snapshot(), self._supervisor.running(), self._supervisor.gates(), now=now
        )
        self._trace_membership(target.membership)
        if planned.at <= now:
            self._act(planned.action, target.membership)
        self._supervisor.check(now=self._clock())
        observed = self._supervisor.observed()
        reported = decide.report(target, observed)
        before = self._reporter.current
        if reported.ready and (before is None or before.state != reported.state
                               or before.domain_uid != reported.domain_uid):  # fmt: skip
            self._traced(trace.Stage.IMEX_READY, reported.domain_uid)  # seen, not yet published
        retry = self._reporter.publish(reported, now=self._clock())
        later = planned.at if planned.at > now else math.inf
        return min(later, retry, self._supervisor.next_check(), self._fabric_due)

    def _act(self, action: decide.Action, membership: decide.Membership | None) -> None:
        if action in (decide.Action.STOP, decide.Action.RESTART):
            self._supervisor.stop()
        if action == decide.Action.STOP:
            self._files.clear_hosts()
            return
        if membership is None or action == decide.Action.NONE:
            return
        domain = membership.domain_uid
        if action == decide.Action.RELOAD:
            self._files.write(membership)  # a failure here is retried by the loop
            self._traced(trace.Stage.CONFIG_RENDERED, domain)
            self._supervisor.reload(membership, now=self._clock())
            return
        try:
            self._files.write(membership)
        except OSError as exc:
            text = f"cannot write the IMEX files: {exc}"
            self._supervisor.start_failed(membership, text, now=self._clock())
            return
        self._traced(trace.Stage.CONFIG_RENDERED, domain)
        cause = "domain" if action == decide.Action.RESTART else ""
        self._supervisor.start(membership, now=self._clock(), cause=cause)
        if self._supervisor.running() is not None:  # not when the binary could not run
            self._traced(trace.Stage.IMEX_STARTED, domain)

    def _traced(self, stage: trace.Stage, domain: str) -> None:
        self._trace.stage(stage, domain=domain, node=self._cfg.node_name)

    def _trace_membership(self, membership: decide.Membership | None) -> None:
        """Trace a slot the first time it is seen (not every pass that sees it again)."""
        member = (membership.domain_uid, membership.slot) if membership is not None else None
        if member is not None and member != self._member:
            self._traced(trace.Stage.MEMBERSHIP_SEEN, member[0])
        self._member = member

    def _shutdown(self) -> None:
        if self._node is not None:
            self._node.stop()
        self._cliques.stop()
        running = self._supervisor.running()
        self._supervisor.stop()
        if running is None:
            return
        self._files.clear_hosts()
        stopped = decide.Report(
            imex.State.NOT_READY,
            running.domain_uid,
            imex.Reason.STARTING,
            "the IMEX agent stopped, and IMEX with it",
        )
        self._reporter.publish(stopped, now=self._clock())

    # -- inputs -------------------------------------------------------------------------

    def _listed(self) -> bool:
        return self._node is not None and self._node.synced() and self._cliques.listed()

    def _snapshot(self) -> decide.Snapshot:
        cfg = self._cfg
        assert self._node is not None
        node = next(iter(self._node.items()), {})
        label = node.get("metadata", {}).get("labels", {}).get(constants.COMPUTE_DOMAIN_LABEL)
        clique_id, note = self._fabric
        objects = self._cliques.by_domain()
        domain = placement.recorded_holder(cfg.node_name, objects, legacy_label=str(label or ""))
        obj = objects.get(domain) if domain else None
        daemons = daemons_of(obj) if obj is not None else None
        return decide.Snapshot(
            node_name=cfg.node_name,
            pod_ip=cfg.pod_ip,
            max_nodes=cfg.max_nodes_per_clique,
            clique_id=clique_id,
            fabric_note=note,
            domain_uid=domain,
            daemons=daemons,
        )

    def _state(self) -> str:
        current = self._reporter.current
        return current.state.value if current is not None else imex.State.NOT_READY.value


def run(cfg: config.AgentConfig) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    stop = threading.Event()
    api = kube_client.connect(cfg.kubeconfig, cfg.api_budget)
    stats = metrics.AgentMetrics(prometheus_client.CollectorRegistry())
    stats.api_requests.attach(api)
    agent = Agent(cfg, api=api, stats=stats)

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        stop.set()
        agent.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    http = httpserver.serve(
        cfg.http_bind,
        registry=stats.registry,
        probes={"/healthz": agent.liveness, "/readyz": agent.readiness},
    )
    log.info("IMEX agent for node %s (pod %s, %s) running", cfg.node_name, cfg.pod_name, cfg.pod_ip)
    # The loop runs in this, the main, thread: IMEX is started from it and dies with it.
    agent.run(stop)
    http.shutdown()
    log.info("IMEX agent stopped")
    return 0
