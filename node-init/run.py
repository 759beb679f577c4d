"""node-init's I/O: observe the fabric, wait out a registration, publish the verdict.

Publishing writes the FabricVerdict file, then makes the Node match it (label, condition,
taint); on a node in a ComputeDomain a usable verdict is held through a fault that may pass
(``hold.py``), and a usable verdict given up is reported by a Warning Event on the Node.
Whether the node is in a domain is read, during such a fault only, from the membership record:
the clique objects of its clique (and, in the kubelet plugin, from its prepared claims).
A fabric problem is a verdict, never a failure of node-init: the init container exits 0
whatever the fabric looks like, so a bad fabric cannot crash-loop anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from computedomains import nodefiles
from computedomains.api import constants, fabricverdict
from computedomains.fabric import discovery, verdictfile
from computedomains.kube import client as kube_client
from computedomains.kube import cliquewatch, events
from computedomains.kube import nodes as kube_nodes

from . import hold
from . import plan as node_plan
from .settings import Settings

Log = Callable[[str], None]
Held = Callable[[], bool]
"""Whether the kubelet plugin's prepared claims hold the node for a domain."""
COMPONENT = "compute-domains-node-init"
"""``source.component`` of node-init's Events."""


def _print(line: str) -> None:
    print(f"node-init: {line}", flush=True)


def run(
    settings: Settings,
    *,
    stop: threading.Event,
    log: Log = _print,
    warn: Log | None = None,
    api: kube_client.Client | None = None,
    held: Held | None = None,
) -> int:
    """Check once (waiting out a registration in progress), publish; with ``watch``, repeat.

    ``warn`` takes the lines about failed re-checks (``log`` when not given); ``api`` is the
    client to use (the plugin's, so one process has one request budget), else its own;
    ``held`` is given by the plugin (its ledger): nothing else on the node knows its claims.
    """
    api = api or kube_client.connect(settings.kubeconfig, settings.api_budget)
    observer = discovery.Observer(
        settings.discovery.make_backend(),
        settings.discovery.proc_root,
        grace=settings.transitional_grace,
    )
    publisher = Publisher(
        api,
        settings,
        recorder=events.Recorder(api, component=COMPONENT, host=settings.node_name),
        log=log,
        clock=time.monotonic,
        held=held or (lambda: False),
    )
    observation = settle(observer, interval=settings.poll_interval, stop=stop, log=log)
    log(_summary(observation))
    publisher.check(observation)
    if settings.watch:
        recheck(
            settings, observer, publisher, stop=stop, log=log, warn=warn or log, last=observation
        )
    return 0


def watch(
    settings: Settings,
    *,
    stop: threading.Event,
    log: Log,
    warn: Log,
    api: kube_client.Client | None = None,
    held: Held | None = None,
) -> None:
    """Check and re-check until ``stop`` is set, starting over after a failure.

    What the kubelet plugin runs in a thread of its own with its own client ``api`` (the
    re-check needs no process of its own) and its ledger's ``held``; ``warn`` takes the
    failures.
    """
    while not stop.is_set():
        try:
            run(settings, stop=stop, log=log, warn=warn, api=api, held=held)
            return
        except Exception as exc:  # noqa: BLE001 - the plugin's thread outlives any failure
            warn(f"check failed, starting over in {settings.recheck_interval:g}s: {exc!r}")
            stop.wait(settings.recheck_interval)


def settle(
    observer: discovery.Observer, *, interval: float, stop: threading.Event, log: Log
) -> discovery.Observation:
    """Observe until the verdict is no longer transitional (or ``stop`` is set).

    The observer itself bounds the wait: once a registration has been in progress for the
    grace period, its verdict is broken (FabricRegistrationTimedOut), which ends the loop.
    """
    while True:
        observation = observer.observe()
        if observation.verdict.kind is not fabricverdict.VerdictKind.TRANSITIONAL or stop.is_set():
            return observation
        log(observation.verdict.message)
        stop.wait(interval)


class Publisher:
    """Publishes each check's verdict, or holds the usable one through a passing fault.

    It starts from the verdict file a previous node-init left (a restarted pod on a node
    running a job must not drop that job's verdict on a fault the old pod would have held).
    ``held`` says whether the plugin's prepared claims hold the node (:func:`hold.in_domain`).
    """

    def __init__(
        self,
        api: kube_client.Client,
        settings: Settings,
        *,
        recorder: events.Recorder,
        log: Log,
        clock: Callable[[], float],
        held: Held = lambda: False,
    ) -> None:
        self._api = api
        self._settings = settings
        self._recorder = recorder
        self._log = log
        self._clock = clock
        self._held = held
        self._usable, self._clique = _published(settings)
        self._spell: hold.Spell | None = None

    def check(self, observation: discovery.Observation) -> None:
        """Act on one check: publish, hold, or degrade the node with a Warning Event."""
        settings = self._settings
        node = kube_nodes.get(self._api, settings.node_name)
        now = self._clock()
        at_stake = hold.asks_membership(observation.verdict, published_usable=self._usable)
        decision = hold.decide(
            observation.verdict,
            published_usable=self._usable,
            in_domain=at_stake and self._in_domain(node),
            spell=self._spell,
            now=now,
            grace=settings.fault_grace,
        )
        if decision.note:
            self._log(decision.note)
        if decision.action is hold.Action.HOLD:
            self._spell = decision.spell
            return
        verdict = verdictfile.build(
            settings.node_name, observation.verdict, observation.report, observation.observed_at
        )
        fabricverdict.write(settings.verdict_file, verdict)
        self._usable, self._clique, self._spell = verdict.usable, verdict.clique, None
        if decision.event is not None:
            self._log(decision.event.message)
            self._recorder.emit(
                events.ObjectRef("Node", settings.node_name, uid=node.uid),
                reason=decision.event.reason.value,
                message=decision.event.message,
                warning=True,
            )
        todo = node_plan.plan(observation.verdict, node, taint_broken=settings.taint_broken)
        apply(self._api, settings.node_name, todo)
        for line in todo.describe():
            self._log(f"{settings.node_name}: {line}")

    def _in_domain(self, node: kube_nodes.NodeView) -> bool:
        """Whether the node is in a domain: the plugin's claims, else the record (one list)."""
        held = self._held()
        clique = self._clique
        label = node.labels.get(constants.COMPUTE_DOMAIN_LABEL, "")
        try:
            cliques = (
                cliquewatch.read(self._api, namespace=self._settings.namespace, clique_id=clique)
                if clique and not held
                else {}
            )
        except kube_client.API_ERRORS as exc:
            # The record unreadable (an API outage, a CRD rolled back): the label, its copy,
            # is the next best fact; the fault must still be judged and published.
            self._log(f"{self._settings.node_name}: cannot read the membership record ({exc}); "
                      "the node label says")  # fmt: skip
            return bool(label) or held
        return hold.in_domain(
            self._settings.node_name,
            clique=clique,
            cliques=cliques,
            label=label,
            held=held,
        )


def _published(settings: Settings) -> tuple[bool, str]:
    """Whether the published verdict is usable, and its clique."""
    try:
        published = fabricverdict.read(settings.verdict_file)
    except nodefiles.CorruptNodeFile:
        return False, ""
    if published is None:
        return False, ""
    return published.usable, published.clique


def apply(api: kube_client.Client, node: str, todo: node_plan.Plan) -> None:
    """Make the changes ``todo`` lists."""
    if todo.labels:
        kube_nodes.patch_labels(api, node, todo.labels)
    if todo.condition is not None:
        kube_nodes.set_condition(
            api,
            node,
            constants.FABRIC_CONDITION,
            todo.condition.status,
            reason=todo.condition.reason,
            message=todo.condition.message,
        )
    if todo.remove_condition:
        kube_nodes.remove_condition(api, node, constants.FABRIC_CONDITION)
    if todo.taint is not None:
        kube_nodes.set_taint(
            api, node, constants.FABRIC_TAINT, node_plan.TAINT_EFFECT, present=todo.taint
        )


def recheck(
    settings: Settings,
    observer: discovery.Observer,
    publisher: Publisher,
    *,
    stop: threading.Event,
    log: Log,
    warn: Log,
    last: discovery.Observation,
) -> None:
    """Observe and publish every ``recheck_interval`` seconds until ``stop`` is set."""
    while not stop.wait(settings.recheck_interval):
        try:
            observation = observer.observe()
            if (observation.verdict.kind, observation.verdict.reason) != (
                last.verdict.kind,
                last.verdict.reason,
            ):
                log(_summary(observation))
            publisher.check(observation)
            last = observation
        # The re-check outlives any one failed round (API server restarting, a file being
        # replaced); the next round starts from scratch, and the error is in the log.
        except Exception as exc:  # noqa: BLE001
            warn(f"re-check failed, retrying in {settings.recheck_interval:g}s: {exc!r}")


def _summary(observation: discovery.Observation) -> str:
    verdict = observation.verdict
    clique = f" clique {verdict.clique}" if verdict.clique else ""
    return f"verdict {verdict.kind} ({verdict.reason}){clique}: {verdict.message}"
