"""node-init's I/O: observe the fabric, wait out a registration, publish the verdict.

Publishing writes the FabricVerdict file, then makes the Node match it (label, condition,
taint). A fabric problem is a verdict, never a failure of node-init: the init container
exits 0 whatever the fabric looks like, so a bad fabric cannot crash-loop anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from computedomains.api import constants
from computedomains.fabric import discovery, verdictfile
from computedomains.fabric.model import VerdictKind
from computedomains.kube import client as kube_client
from computedomains.kube import nodes as kube_nodes

from . import plan as node_plan
from .settings import Settings

Log = Callable[[str], None]


def _print(line: str) -> None:
    print(f"node-init: {line}", flush=True)


def run(settings: Settings, *, stop: threading.Event, log: Log = _print) -> int:
    """Check once (waiting out a registration in progress), publish; with ``watch``, repeat."""
    api = kube_client.connect(settings.kubeconfig)
    observer = discovery.Observer(
        settings.discovery.make_backend(),
        settings.discovery.proc_root,
        grace=settings.transitional_grace,
    )
    observation = settle(observer, interval=settings.poll_interval, stop=stop, log=log)
    log(_summary(observation))
    publish(api, settings, observation, log=log)
    if settings.watch:
        recheck(api, settings, observer, stop=stop, log=log, last=observation)
    return 0


def settle(
    observer: discovery.Observer, *, interval: float, stop: threading.Event, log: Log
) -> discovery.Observation:
    """Observe until the verdict is no longer transitional (or ``stop`` is set).

    The observer itself bounds the wait: once a registration has been in progress for the
    grace period, its verdict is broken (FabricRegistrationTimedOut), which ends the loop.
    """
    while True:
        observation = observer.observe()
        if observation.verdict.kind is not VerdictKind.TRANSITIONAL or stop.is_set():
            return observation
        log(observation.verdict.message)
        stop.wait(interval)


def publish(
    api: kube_client.Client, settings: Settings, observation: discovery.Observation, *, log: Log
) -> node_plan.Plan:
    """Write the verdict file, then bring the Node in line with the verdict."""
    document = verdictfile.to_document(
        settings.node_name, observation.verdict, observation.report, observation.observed_at
    )
    verdictfile.write(settings.verdict_file, document)
    node = kube_nodes.get(api, settings.node_name)
    todo = node_plan.plan(observation.verdict, node, taint_broken=settings.taint_broken)
    apply(api, settings.node_name, todo)
    for line in todo.describe():
        log(f"{settings.node_name}: {line}")
    return todo


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
    api: kube_client.Client,
    settings: Settings,
    observer: discovery.Observer,
    *,
    stop: threading.Event,
    log: Log,
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
            publish(api, settings, observation, log=log)
            last = observation
        # A sidecar outlives any one failed round (API server restarting, a file being
        # replaced); the next round starts from scratch, and the error is in the log.
        except Exception as exc:  # noqa: BLE001
            log(f"re-check failed, retrying in {settings.recheck_interval:g}s: {exc!r}")


def _summary(observation: discovery.Observation) -> str:
    verdict = observation.verdict
    clique = f" clique {verdict.clique}" if verdict.clique else ""
    return f"verdict {verdict.kind} ({verdict.reason}){clique}: {verdict.message}"
